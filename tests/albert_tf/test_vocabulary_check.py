"""--spm_model_file is checked against the vocabulary the data and the model were made with (issue 35, N7).

Two SentencePiece models of the same size (120 pieces) trained on different made-up corpora: `made` tokenized the
shards and sits beside the pretrained model; `other` has the same size, so no size check can tell them apart,
and every id of it stands for another piece. albert-pretrain compares --spm_model_file with the `spm_model`
fingerprint of the shards' manifest; albert-finetune compares it with the vocabulary beside --init_checkpoint
(evaluating: the saved model's). Another vocabulary is refused in one line naming both files, before anything
is trained; --allow_other_vocabulary accepts it with a WARNING. Shards without a manifest: a WARNING only.
"""

import json
import logging
import os
import re
import subprocess
import sys

import pytest
from absl import flags

import albert_tf
from tests.albert_tf.task_testlib import SPM_VOCAB_SIZE, tiny_config, train_tiny_spm
from tests.albert_tf.tasks import finetune_data

FLAGS = flags.FLAGS
SHARD = "pretrain-00000-of-00001.tfrecord"


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """made / other: the two vocabularies; shards: one shard made with `made` and its manifest; config; model:
    a pretrained folder holding `made`."""
    import pipelines
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    folder = tmp_path_factory.mktemp("vocabulary_check")
    made = train_tiny_spm(str(folder))
    other_corpus = write_corpus(str(folder / "other_corpus.txt"), num_docs=60, seed=7)
    other = tokenizer.train_sentencepiece([other_corpus], str(folder / "other"), vocab_size=SPM_VOCAB_SIZE, seed=1)
    shards = str(folder / "shards")
    pipelines.create_pretraining_data([str(folder / "corpus.txt")], made, shards, max_seq_length=32,
                                      max_predictions_per_seq=5, dupe_factor=1, num_shards=1, random_seed=7)
    config = str(folder / "albert_config.json")
    tiny_config().to_json_file(config)
    model = str(folder / "model")
    albert_tf.save_pretrained(albert_tf.AlbertPretrainer(tiny_config()), model, spm_model_file=made)
    return {"made": made, "other": other, "shards": shards, "config": config, "model": model, "folder": folder}


def _fingerprint(path):
    from albert_tf.vocabulary_check import sha256_of

    return sha256_of(path)[:12]


def test_the_two_vocabularies_differ_only_in_their_pieces(assets):
    import pipelines

    made, other = (pipelines.SentencePieceVocab.from_file(assets[k]) for k in ("made", "other"))
    assert made.vocab_size == other.vocab_size == SPM_VOCAB_SIZE
    assert _fingerprint(assets["made"]) != _fingerprint(assets["other"])
    with open(os.path.join(assets["shards"], "pretrain.manifest.json"), encoding="utf-8") as f:
        assert json.load(f)["spm_model"]["name"] == "sp.model"


# --------------------------------------------------------------------------- albert-pretrain
def _pretrain_argv(assets, output_dir, *extra):
    return [f"--albert_config_file={assets['config']}", f"--input_file={assets['shards']}/{SHARD}",
            f"--output_dir={output_dir}", "--preset=", "--train_batch_size=4", "--gradient_accumulation_steps=1",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--num_train_steps=1", "--num_warmup_steps=0",
            "--learning_rate=0.01", "--save_checkpoints_steps=1", "--log_steps=1", "--do_train", "--nodo_eval",
            "--strategy=default", "--mixed_precision=float32", "--init_checkpoint=", *extra]


def _pretrain(argv):
    import flags.core_flags as albert_flags
    from albert_tf.bin import pretrain

    albert_flags.define_all_pretraining_flags()
    FLAGS.unparse_flags()
    FLAGS(["albert-pretrain", *argv])
    try:
        pretrain.main(["albert-pretrain"])
    finally:
        FLAGS.unparse_flags()


def _pretrain_refusal(assets):
    manifest = os.path.join(assets["shards"], "pretrain.manifest.json")
    return (f"--spm_model_file={assets['other']} (sha256 {_fingerprint(assets['other'])}) is not the vocabulary the "
            f"shards were made with: {manifest} records sp.model (sha256 {_fingerprint(assets['made'])}). Its ids "
            "stand for other pieces: give that vocabulary, or --allow_other_vocabulary to use this one anyway.")


def test_pretrain_refuses_another_vocabulary_than_the_shards_before_training(assets, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError) as refused:
        _pretrain(_pretrain_argv(assets, out, f"--spm_model_file={assets['other']}"))
    assert str(refused.value) == _pretrain_refusal(assets)
    assert not out.exists() or not os.listdir(out)  # nothing trained, nothing written


def test_pretrain_takes_another_vocabulary_with_the_flag_and_a_warning(assets, tmp_path, caplog):
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="absl"):
        _pretrain(_pretrain_argv(assets, out, f"--spm_model_file={assets['other']}", "--allow_other_vocabulary"))
    warned = [r.getMessage() for r in caplog.records if "is not the vocabulary the shards" in r.getMessage()]
    assert len(warned) == 1 and warned[0].endswith("using it anyway (--allow_other_vocabulary).")
    with open(out / "spm.model", "rb") as copied, open(assets["other"], "rb") as given:
        assert copied.read() == given.read()  # the vocabulary the user chose travels with the model


def test_pretrain_vocabulary_checks_without_training(assets, tmp_path, caplog):
    """The check itself: the shards' own vocabulary passes silently; a shard with no manifest is a warning."""
    import shutil

    from albert_tf.vocabulary_check import check_shards_vocabulary

    shard = os.path.join(assets["shards"], SHARD)
    with caplog.at_level(logging.WARNING, logger="absl"):
        check_shards_vocabulary(assets["made"], [shard], allow=False)
    assert not caplog.records
    bare = tmp_path / SHARD  # copied without its manifest
    shutil.copy(shard, bare)
    with caplog.at_level(logging.WARNING, logger="absl"):
        check_shards_vocabulary(assets["other"], [str(bare)], allow=False)
    assert [r.getMessage() for r in caplog.records] == [
        f"--spm_model_file={assets['other']} is not checked against 1 input file(s) whose manifest records no "
        f"vocabulary (e.g. {bare}): shards made with another vocabulary would train on other ids."]


def test_installed_albert_pretrain_refuses_another_vocabulary_in_one_line(assets, tmp_path):
    binary = os.path.join(os.path.dirname(sys.executable), "albert-pretrain")
    run = subprocess.run([binary, *_pretrain_argv(assets, tmp_path / "run", f"--spm_model_file={assets['other']}")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.startswith("albert-pretrain: ")]
    assert lines == [f"albert-pretrain: {_pretrain_refusal(assets)}"], run.stderr[-2000:]
    assert "Traceback" not in run.stderr


# --------------------------------------------------------------------------- albert-finetune
def _finetune(argv):
    from albert_tf.bin import finetune

    finetune._define_flags()
    FLAGS.unparse_flags()
    FLAGS(["albert-finetune", *argv])
    try:
        finetune.main(["albert-finetune"])
    finally:
        FLAGS.unparse_flags()


def _finetune_argv(assets, data, out, *extra):
    return ["--task=glue/sst-2", f"--data_dir={data}", f"--output_dir={out}", f"--init_checkpoint={assets['model']}",
            "--albert_config_file=", "--max_seq_length=16", "--train_batch_size=4", "--eval_batch_size=8",
            "--learning_rate=1e-3", "--train_step=1", "--warmup_step=0", "--strategy=default",
            "--mixed_precision=float32", "--seed=1", "--log_steps=1", "--optimizer=adamw", "--pooling=pooled",
            "--save_checkpoints_steps=1000", "--do_train", "--nodo_eval", "--nodo_predict", *extra]


def test_finetune_refuses_another_vocabulary_than_the_checkpoints(assets, tmp_path, caplog):
    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"))
    out = tmp_path / "out"
    found = os.path.join(assets["model"], "spm.model")
    with pytest.raises(ValueError) as refused:
        _finetune(_finetune_argv(assets, data, out, f"--spm_model_file={assets['other']}"))
    assert str(refused.value) == (
        f"--spm_model_file={assets['other']} (sha256 {_fingerprint(assets['other'])}) is not the vocabulary of "
        f"--init_checkpoint={assets['model']}: {found} (sha256 {_fingerprint(assets['made'])}). Its ids stand for "
        "other pieces: give that vocabulary, or --allow_other_vocabulary to use this one anyway.")
    assert not (out / "finetune_run.json").exists()

    # The checkpoint's own vocabulary given explicitly is taken silently.
    _finetune(_finetune_argv(assets, data, tmp_path / "same", f"--spm_model_file={found}"))
    # Another one with the flag: a WARNING, and the run uses (and saves) the one given.
    with caplog.at_level(logging.WARNING, logger="absl"):
        _finetune(_finetune_argv(assets, data, out, f"--spm_model_file={assets['other']}", "--allow_other_vocabulary"))
    assert [r.getMessage() for r in caplog.records if "is not the vocabulary of" in r.getMessage()] == [
        str(refused.value).split(". Its ids")[0] + "; using it anyway (--allow_other_vocabulary)."]
    with open(out / "spm.model", "rb") as saved, open(assets["other"], "rb") as given:
        assert saved.read() == given.read()

    # Evaluating the saved model with a vocabulary other than its own is refused too, naming --output_dir.
    with pytest.raises(ValueError, match=re.escape(f"is not the vocabulary of --output_dir={out}: {out}/spm.model ")):
        _finetune([*_finetune_argv(assets, data, out, f"--spm_model_file={found}"), "--nodo_train", "--do_eval"])
