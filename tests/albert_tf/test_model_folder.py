"""The folders users start from: one rule for their parts (albert_tf/model_folder.py), used by every binary.

The released and Hugging Face folders are built in their exact layouts from the golden fixtures
(tests/fixtures/original_albert/g1_i1, tests/fixtures/hf_albert/gelu_new_g1_i1: vocab 50, 32 positions)
with a 50-piece SentencePiece model under the name each release uses.
"""

import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

import albert_tf
from albert_tf import model_folder
from albert_tf.bin import export
from albert_tf.tasks.run_state import file_sha256
from albert_tf.tasks.runner import read_eval_results
from tests.albert_tf import starting_points
from tests.albert_tf.task_testlib import train_tiny_spm
from tests.albert_tf.tasks import finetune_data
from tests.albert_tf.test_finetune_binary import _run

FLAGS = flags.FLAGS
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{"released": albert_base_v2.tar.gz's layout, "huggingface": a Hugging Face folder's, "spm": the vocabulary}."""
    root = tmp_path_factory.mktemp("starting_points")
    spm = starting_points.vocabulary(str(root))
    return {"released": starting_points.released_folder(str(root / "albert_base"), spm),
            "huggingface": starting_points.hugging_face_folder(str(root / "albert-tiny-hf"), spm), "spm": spm}


def test_released_folder_resolves_to_its_parts(folders):
    folder = folders["released"]
    assert not os.path.exists(os.path.join(folder, "checkpoint"))
    assert model_folder.resolve_model_folder(folder) == model_folder.ModelFolder(
        folder=folder, weights=os.path.join(folder, "model.ckpt-best"), weights_format="tf_checkpoint",
        config_file=os.path.join(folder, "albert_config.json"), vocabulary=os.path.join(folder, "30k-clean.model"))
    # The prefix form finds the same config and vocabulary in its folder.
    prefix = os.path.join(folder, "model.ckpt-best")
    assert model_folder.resolve_model_folder(prefix).weights == prefix
    assert model_folder.find_vocabulary(prefix) == os.path.join(folder, "30k-clean.model")
    # The folder loads the golden weights: the original code's pooled output.
    io = np.load(os.path.join(starting_points.ORIGINAL, "io.npz"))
    out = albert_tf.load_checkpoint(folder).encoder(
        {"input_ids": io["input_ids"], "input_mask": io["input_mask"], "segment_ids": io["segment_ids"]})
    np.testing.assert_allclose(out["pooled_output"].numpy(), io["pooled_output"], atol=1e-5)


def test_hugging_face_folder_resolves_to_its_parts(folders):
    folder = folders["huggingface"]
    assert model_folder.resolve_model_folder(folder) == model_folder.ModelFolder(
        folder=folder, weights=os.path.join(folder, "model.safetensors"), weights_format="huggingface",
        config_file=os.path.join(folder, "config.json"), vocabulary=os.path.join(folder, "spiece.model"))
    config = model_folder.model_config(folder)
    assert (config.vocab_size, config.max_position_embeddings, config.hidden_act) == (50, 32, "gelu")


@pytest.mark.parametrize("names,expected", [
    (["spm.model", "30k-clean.model", "spiece.model"], "spm.model"),  # ours first
    (["30k-clean.model", "spiece.model", "other.model"], "30k-clean.model"),
    (["spiece.model", "other.model"], "spiece.model"),
    (["mine.model", "mine.vocab"], "mine.model"),  # the only *.model
    (["mine.vocab", "albert_config.json"], None),
])
def test_vocabulary_rule(tmp_path, names, expected):
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    assert model_folder.find_vocabulary(str(tmp_path)) == (None if expected is None else str(tmp_path / expected))


def test_vocabulary_refusals_name_what_was_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        model_folder.require_vocabulary(str(tmp_path))
    assert str(missing.value) == (f"No SentencePiece model: looked for spm.model, 30k-clean.model, spiece.model or "
                                  f"a single *.model file in {str(tmp_path)!r}; give --spm_model_file.")
    for name in ("a.model", "b.model"):
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(ValueError) as several:
        model_folder.find_vocabulary(str(tmp_path))
    assert str(several.value) == (f"{str(tmp_path)!r} holds several SentencePiece models (a.model, b.model) and "
                                  "none of spm.model, 30k-clean.model, spiece.model: name one with --spm_model_file.")


@pytest.mark.parametrize("names,state_file,expected", [
    (["model.ckpt-best.index", "model.ckpt-best.data-00000-of-00001"], None, "model.ckpt-best"),
    # A `checkpoint` state file names the latest of several.
    (["ckpt-1.index", "ckpt-7.index"], 'model_checkpoint_path: "ckpt-7"\n', "ckpt-7"),
    (["model.safetensors", "config.json"], None, "model.safetensors"),
])
def test_weights_rule(tmp_path, names, state_file, expected):
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    if state_file:
        (tmp_path / "checkpoint").write_text(state_file)
    assert model_folder.find_weights(str(tmp_path))[0] == str(tmp_path / expected)


@pytest.mark.parametrize("names,message", [
    (["model.ckpt-1000.index", "model.ckpt-2000.index"],
     "{f!r} holds several TF checkpoints (model.ckpt-1000, model.ckpt-2000) and no 'checkpoint' file naming one: "
     "give the prefix, e.g. {last!r}."),
    (["model.safetensors", "model.weights.safetensors"],
     "{f!r} holds both model.weights.safetensors and model.safetensors: keep one of them."),
    (["30k-clean.model"], "{f!r} holds no weights this library reads: looked for model.weights.safetensors, "
     "model.safetensors, a 'checkpoint' file or a single TF checkpoint (NAME.index, e.g. model.ckpt-best.index)."),
])
def test_weights_refusals_in_one_line(tmp_path, names, message):
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(ValueError) as refused:
        model_folder.find_weights(str(tmp_path))
    assert str(refused.value) == message.format(f=str(tmp_path), last=str(tmp_path / "model.ckpt-2000"))


def _continued_run(folder, final_step, checkpoint_step):
    """A pretraining folder: final weights of `final_step` (None: recording no step), a checkpoint of another model.

    Returns:
        (the final weights' model, the checkpoint's model).
    """
    config = albert_tf.AlbertConfig.tiny()
    final, later = albert_tf.AlbertPretrainer(config), albert_tf.AlbertPretrainer(config)
    albert_tf.save_pretrained(final, folder, step=final_step)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=later), folder, max_to_keep=5,
                                         checkpoint_name="ckpt")
    manager.save(checkpoint_number=checkpoint_step)
    return final, later


def _assert_same_weights(a, b):
    for x, y in zip(a.weights, b.weights, strict=True):
        np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=x.path)


def test_the_newer_of_final_weights_and_checkpoints_wins(tmp_path):
    """Issue 36 F5: a run finished at step 2 (its final weights), continued and preempted at step 4 (ckpt-4)."""
    folder = str(tmp_path / "continued")
    final, later = _continued_run(folder, final_step=2, checkpoint_step=4)
    assert model_folder.find_weights(folder) == (os.path.join(folder, "ckpt-4"), model_folder.TF_CHECKPOINT)
    _assert_same_weights(albert_tf.load_checkpoint(folder), later)
    # The run's end: the final weights record the step of its last checkpoint, and win.
    folder = str(tmp_path / "finished")
    final, _ = _continued_run(folder, final_step=4, checkpoint_step=4)
    assert model_folder.find_weights(folder) == (os.path.join(folder, "model.weights.safetensors"),
                                                 model_folder.ALBERT_TF)
    _assert_same_weights(albert_tf.load_checkpoint(folder), final)
    # The same on a remote folder, whose files were copied (new modification times): the steps decide.
    remote = _upload(str(tmp_path / "continued"), "ram://newest/continued")
    assert model_folder.find_weights(remote) == (f"{remote}/ckpt-4", model_folder.TF_CHECKPOINT)


def test_final_weights_without_a_step_are_compared_by_modification_time(tmp_path):
    folder = str(tmp_path / "older_version")
    _continued_run(folder, final_step=None, checkpoint_step=4)
    weights, index = os.path.join(folder, "model.weights.safetensors"), os.path.join(folder, "ckpt-4.index")
    for weights_time, index_time, expected in ((1_000, 2_000, "ckpt-4"), (2_000, 1_000, "model.weights.safetensors")):
        os.utime(weights, ns=(weights_time * 10**9,) * 2)
        os.utime(index, ns=(index_time * 10**9,) * 2)
        assert model_folder.find_weights(folder)[0] == os.path.join(folder, expected)
    os.utime(index, ns=(2_000 * 10**9,) * 2)
    with pytest.raises(ValueError) as refused:
        model_folder.find_weights(folder)
    assert str(refused.value) == (
        f"{folder!r} holds model.weights.safetensors and the training checkpoint ckpt-4, and neither a step nor a "
        f"modification time tells which is newer: give the prefix {os.path.join(folder, 'ckpt-4')!r}, or remove one.")


def _upload(folder, remote):
    tf.io.gfile.makedirs(remote)
    for name in os.listdir(folder):
        tf.io.gfile.copy(os.path.join(folder, name), f"{remote}/{name}", overwrite=True)
    return remote


def test_remote_folders_resolve_and_load(folders):
    released = _upload(folders["released"], "ram://starting_points/albert_base")
    parts = model_folder.resolve_model_folder(released)
    assert (parts.weights, parts.config_file, parts.vocabulary) == (
        f"{released}/model.ckpt-best", f"{released}/albert_config.json", f"{released}/30k-clean.model")
    # TensorFlow's checkpoint reader cannot read ram:// prefixes (gs:// it can); safetensors and configs are
    # read here through tf.io.gfile.
    hugging_face = _upload(folders["huggingface"], "ram://starting_points/hf")
    assert model_folder.find_vocabulary(hugging_face) == f"{hugging_face}/spiece.model"
    np.testing.assert_array_equal(albert_tf.load_checkpoint(hugging_face).encoder.get_weights()[0],
                                  albert_tf.load_checkpoint(folders["huggingface"]).encoder.get_weights()[0])


def test_from_pretrained_caps_its_length_at_the_model_positions(folders):
    classifier = albert_tf.AlbertClassifier.from_pretrained(folders["released"], 2)
    assert classifier.preprocessor.max_seq_length == 32  # min(128, 32 positions)
    assert classifier.preprocessor.vocab_size == 50  # 30k-clean.model was found
    assert albert_tf.AlbertClassifier.from_pretrained(folders["huggingface"], 2,
                                                      max_seq_length=16).preprocessor.max_seq_length == 16
    with pytest.raises(ValueError) as refused:
        albert_tf.AlbertClassifier.from_pretrained(folders["huggingface"], 2, max_seq_length=64)
    assert str(refused.value) == ("max_seq_length=64 exceeds the model's max_position_embeddings=32: give at most "
                                  "32, or leave it out to use 32.")


def _finetune_argv(init, data, out, *extra):
    # Neither --spm_model_file nor --max_seq_length: both come from the folder.
    return [f"--init_checkpoint={init}", "--task=glue/sst-2", f"--data_dir={data}", f"--output_dir={out}",
            "--train_batch_size=4", "--eval_batch_size=8", "--learning_rate=1e-3", "--num_train_epochs=1",
            "--warmup_proportion=0.1", "--strategy=default", "--mixed_precision=float32", "--seed=1",
            "--log_steps=1", "--optimizer=adamw", "--save_checkpoints_steps=1000", "--do_train", "--do_eval",
            "--nodo_predict", *extra]


@pytest.mark.parametrize("kind,vocabulary", [("released", "30k-clean.model"), ("huggingface", "spiece.model")])
def test_finetune_starts_from_the_folder_alone(tmp_path, folders, kind, vocabulary):
    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"))
    out = str(tmp_path / "out")
    _run(_finetune_argv(folders[kind], data, out))
    assert read_eval_results(os.path.join(out, "eval_results.txt"))["num_examples"] == 6
    with open(os.path.join(out, "finetune_run.json")) as f:
        settings = json.load(f)
    # The resolved length (32 positions) and the folder's vocabulary are what a resume is compared with.
    assert settings["max_seq_length"] == 32
    assert settings["spm_model_sha256"] == file_sha256(os.path.join(folders[kind], vocabulary))
    with open(os.path.join(out, "task_config.json")) as f:
        assert json.load(f)["max_seq_length"] == 32
    with open(os.path.join(out, "spm.model"), "rb") as copied, open(folders["spm"], "rb") as original:
        assert copied.read() == original.read()


def test_finetune_refuses_a_length_above_the_positions_in_one_line(tmp_path, folders):
    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"))
    out = str(tmp_path / "out")
    with pytest.raises(ValueError) as refused:
        _run(_finetune_argv(folders["released"], data, out, "--max_seq_length=64"))
    assert str(refused.value) == ("--max_seq_length=64 exceeds the model's max_position_embeddings=32: give at "
                                  "most 32, or leave it out to use 32.")
    assert not os.path.exists(os.path.join(out, "finetune_run.json"))


def test_a_run_that_failed_before_its_first_step_does_not_bind_its_folder(tmp_path, folders):
    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"))
    out = str(tmp_path / "out")
    wrong_vocabulary = train_tiny_spm(str(tmp_path))  # 120 pieces: the 50-piece model does not build
    refusal = "The SentencePiece model has 120 pieces but the config's vocab_size is 50."
    argv = _finetune_argv(folders["released"], data, out, f"--spm_model_file={wrong_vocabulary}",
                          "--allow_other_vocabulary")  # past the vocabulary check, to the model's build
    with pytest.raises(ValueError, match=re.escape(refusal)):
        _run(argv)
    assert not os.path.exists(os.path.join(out, "finetune_run.json"))
    # Other settings in the same folder: the same failure, not "holds a fine-tuning run with other settings".
    with pytest.raises(ValueError, match=re.escape(refusal)):
        _run([*argv, "--learning_rate=2e-3"])


def _export(argv):
    if "format" not in FLAGS:
        export._define_flags()
    FLAGS.unparse_flags()
    FLAGS(["albert-export", *argv])
    try:
        return export.main(["albert-export"])
    finally:
        FLAGS.unparse_flags()


def test_export_refuses_a_length_above_the_positions_in_one_line(tmp_path, folders):
    with pytest.raises(ValueError) as refused:
        _export([f"--checkpoint={folders['huggingface']}", "--head=encoder", f"--export_dir={tmp_path / 'e'}",
                 "--max_seq_length=33"])
    assert str(refused.value) == ("--max_seq_length=33 exceeds the model's max_position_embeddings=32: give at "
                                  "most 32, or leave it out to use 32.")
    assert not os.path.exists(tmp_path / "e")


def test_finetune_help_says_where_the_vocabulary_is_found():
    """albert-finetune --help (its docstring and --spm_model_file's help) names the rule `find_spm_model` follows:
    the names of `model_folder.VOCABULARY_NAMES` in order, the only *.model file, then --output_dir."""
    from albert_tf.bin import finetune

    finetune._define_flags()
    names = ", ".join(model_folder.VOCABULARY_NAMES)
    assert f"beside it ({names}, else the only *.model file" in " ".join(finetune.__doc__.split())
    assert "else in --output_dir" in " ".join(finetune.__doc__.split())
    assert " ".join(FLAGS["spm_model_file"].help.split()).endswith(
        f"Default (fine-tuning): {names} or the only *.model file beside --init_checkpoint, else in --output_dir.")
