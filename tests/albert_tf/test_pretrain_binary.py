"""albert-pretrain end to end on tiny shards, its recipes and its usage errors."""

import dataclasses
import glob
import os
import subprocess
import sys

import pytest
from absl import app, flags
from absl.testing import flagsaver

import albert_tf
from albert_tf.bin import pretrain

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

import flags.core_flags as albert_flags  # noqa: E402

FLAGS = flags.FLAGS
albert_flags.define_all_pretraining_flags()  # as albert-pretrain's run() does


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain_bin")
    tl.write_tfrecords(str(root / "data" / "train-0.tfrecord"), 40, seed=3)
    tl.write_tfrecords(str(root / "data" / "eval-0.tfrecord"), 12, seed=4)
    tl.tiny_config().to_json_file(str(root / "albert_config.json"))
    # A real SentencePiece model of the config's vocab_size (100 pieces).
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    corpus = write_corpus(str(root / "corpus.txt"), num_docs=40)
    model = tokenizer.train_sentencepiece([corpus], str(root / "sp"),
                                          vocab_size=tl.VOCAB, seed=1)
    os.replace(model, root / "vocab.model")
    return root


def _command(workdir, output_dir, steps, *extra):
    return [
        sys.executable, "-m", "albert_tf.bin.pretrain",
        f"--albert_config_file={workdir / 'albert_config.json'}",
        f"--input_file={workdir / 'data' / 'train-*.tfrecord'}",
        f"--eval_input_file={workdir / 'data' / 'eval-*.tfrecord'}",
        f"--output_dir={output_dir}", f"--spm_model_file={workdir / 'vocab.model'}",
        "--train_batch_size=8", "--gradient_accumulation_steps=2",
        "--max_seq_length=16", "--max_predictions_per_seq=3",
        f"--num_train_steps={steps}", "--num_warmup_steps=1",
        "--learning_rate=0.01", "--save_checkpoints_steps=2", "--log_steps=1",
        "--do_eval", "--eval_batch_size=4", "--max_eval_steps=2", *extra,
    ]


def _run(cmd):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_end_to_end_then_resume_with_more_steps(workdir):
    out = workdir / "run"
    first = _run(_command(workdir, out, 4))
    assert first.returncode == 0, first.stderr[-4000:]
    log = first.stderr
    for step in (1, 2, 3, 4):
        assert f"step {step}/4 loss " in log
    line = [l for l in log.splitlines() if "step 4/4 loss" in l][0]
    for word in ("mlm_acc", "sop_acc", "lr", "examples/s", "ETA"):
        assert word in line, line
    names = sorted(os.listdir(out))
    for name in ("albert_config.json", "checkpoint", "ckpt-4.index",
                 "eval_results.txt", "model.weights.safetensors", "spm.model", "train"):
        assert name in names, names
    results = dict(line.split(" = ") for line in
                   (out / "eval_results.txt").read_text().splitlines())
    assert results["global_step"] == "4"
    assert 0.0 <= float(results["sentence_order_accuracy"]) <= 1.0
    assert float(results["masked_lm_loss"]) > 0
    # Two eval batches of 4 from a 12-example file.
    assert results["num_examples"] == "8"
    # The exported folder loads with the library.
    assert albert_tf.load_checkpoint(str(out)).config == tl.tiny_config()

    second = _run(_command(workdir, out, 6))
    assert second.returncode == 0, second.stderr[-4000:]
    assert "Resumed from step 4" in second.stderr
    assert "schedule changed: num_train_steps 4 -> 6" in second.stderr
    assert "step 5/6 loss" in second.stderr and "step 1/6" not in second.stderr
    assert sorted(glob.glob(str(out / "ckpt-*.index")))[-1].endswith("ckpt-6.index")


def test_dynamic_masking_at_a_higher_rate(workdir):
    run = _run(_command(workdir, workdir / "dynamic", 2, "--masking=dynamic",
                        "--masked_lm_prob=0.4"))
    assert run.returncode == 0, run.stderr[-4000:]
    # round(0.4 x 16) = 6 masked positions per row, above the shards' 3.
    assert "masked_lm_prob 0.4, 6 masked positions per row" in run.stderr
    assert "step 2/2 loss" in run.stderr


def test_dynamic_masking_at_a_higher_rate_masks_that_many_positions_of_the_shards(workdir):
    """The batches the binary trains on (its reader's arguments): each row masks min(6, round(0.4 x its
    length)) positions (the original's budget, its length counting [CLS] and [SEP]), inside the row and never
    [CLS]/[SEP]; the shards themselves hold at most 3."""
    import pipelines

    batches = pipelines.pretraining_dataset(
        str(workdir / "data" / "train-*.tfrecord"), 8, tl.SEQ, tl.PREDS, is_training=True, masking="dynamic",
        seed=12345, masked_lm_prob=0.4, vocab_size=tl.VOCAB, type_vocab_size=2)
    counts = []
    for batch in batches.take(3):
        lengths = batch["input_mask"].numpy().sum(1)
        masked = batch["masked_lm_weights"].numpy() > 0
        assert masked.shape == (8, 6)
        for row, length in enumerate(lengths):
            positions = batch["masked_lm_positions"].numpy()[row][masked[row]]
            assert masked[row].sum() == min(6, max(1, round(0.4 * length))), (row, length, masked[row])
            assert len(set(positions)) == len(positions) and positions.min() > 0 and positions.max() < length - 1
        counts.extend(masked.sum(1))
    assert max(counts) == 6 and sum(c > tl.PREDS for c in counts) >= 6, counts


def test_output_dir_with_another_config_is_refused(workdir):
    out = workdir / "other"
    out.mkdir()
    tl.tiny_config().to_json_file(str(out / "albert_config.json"))
    cfg = workdir / "bigger.json"
    tl.tiny_config(hidden_size=32).to_json_file(str(cfg))
    cmd = _command(workdir, out, 2) + [f"--albert_config_file={cfg}"]
    proc = _run(cmd)
    assert proc.returncode != 0
    assert "holds a run of a different model" in proc.stderr
    assert "hidden_size: 16 there vs 32 now" in proc.stderr


@pytest.mark.parametrize("recipe,preset", [
    ("albert_base_pretrain.cfg", "albert_base_v1"),
    ("albert_large_pretrain.cfg", "albert_large_v1"),
    ("albert_xlarge_pretrain.cfg", "albert_xlarge_v1"),
    ("albert_xxlarge_pretrain.cfg", "albert_xxlarge_v1"),
])
def test_recipes_hold_the_paper_settings(recipe, preset):
    path = os.path.join(REPO, "flags", "recipes", recipe)
    with flagsaver.flagsaver():
        FLAGS.unparse_flags()
        FLAGS(["albert-pretrain", f"--flagfile={path}"])
        assert FLAGS.preset == preset
        assert preset in albert_tf.AlbertConfig.presets()
        assert (FLAGS.train_batch_size, FLAGS.max_seq_length,
                FLAGS.max_predictions_per_seq) == (4096, 512, 20)
        assert (FLAGS.optimizer, FLAGS.learning_rate) == ("lamb", 0.00176)
        assert (FLAGS.num_train_steps, FLAGS.num_warmup_steps) == (125000, 3125)
        assert FLAGS.save_checkpoints_steps == 5000
    FLAGS.unparse_flags()


def _main_error(tmp_path, **overrides):
    values = dict(output_dir=str(tmp_path / "out"), preset=None,
                  albert_config_file=None, input_file=None)
    values.update(overrides)
    with flagsaver.flagsaver(**values):
        with pytest.raises(app.UsageError) as info:
            pretrain.main(["albert-pretrain"])
    return str(info.value)


def test_usage_errors_quote_the_bad_value(tmp_path, workdir):
    if not FLAGS.is_parsed():
        FLAGS(["albert-pretrain"])
    cfg = str(workdir / "albert_config.json")
    assert "--input_file='nowhere/*.tfrecord' matches no file" in _main_error(
        tmp_path, albert_config_file=cfg, input_file="nowhere/*.tfrecord")
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert "are empty" in _main_error(tmp_path, albert_config_file=cfg,
                                      input_file=str(empty))
    assert "exactly one of --preset and --albert_config_file" in _main_error(
        tmp_path, preset="albert_base_v2", albert_config_file=cfg)
    assert "does not exist" in _main_error(
        tmp_path, albert_config_file=str(tmp_path / "missing.json"))
    assert "--masked_lm_prob=0.4 needs --masking=dynamic" in _main_error(
        tmp_path, albert_config_file=cfg, masked_lm_prob=0.4,
        input_file=str(workdir / "data" / "train-*.tfrecord"))


def test_vocabulary_size_must_match_the_config(tmp_path, workdir):
    if not FLAGS.is_parsed():
        FLAGS(["albert-pretrain"])
    bigger = tmp_path / "bigger.json"
    tl.tiny_config(vocab_size=120).to_json_file(str(bigger))
    spm = str(workdir / "vocab.model")
    values = dict(output_dir=str(tmp_path / "out"), preset=None,
                  albert_config_file=str(bigger), spm_model_file=spm,
                  input_file=str(workdir / "data" / "train-*.tfrecord"))
    with flagsaver.flagsaver(**values):
        with pytest.raises(ValueError) as info:
            pretrain.main(["albert-pretrain"])
    message = str(info.value)
    assert "\n" not in message
    for part in (f"--spm_model_file={spm}", "100 pieces", "vocab_size=120",
                 f"--albert_config_file={bigger}"):
        assert part in message, message
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"not a sentencepiece model")
    with flagsaver.flagsaver(**dict(values, spm_model_file=str(junk))):
        with pytest.raises(ValueError, match="is not a SentencePiece model"):
            pretrain.main(["albert-pretrain"])


def test_configs_are_filled_from_the_flags():
    from albert_tf import training

    path = os.path.join(REPO, "flags", "recipes", "albert_base_pretrain.cfg")
    with flagsaver.flagsaver():
        FLAGS.unparse_flags()
        FLAGS(["albert-pretrain", f"--flagfile={path}", "--seed=5",
               "--gradient_accumulation_steps=8", "--masking=dynamic",
               "--masked_lm_prob=0.4"])
        optimization, run_config, data = albert_flags.pretraining_configs(FLAGS)
        assert optimization == training.OptimizationConfig(
            train_batch_size=4096, num_train_steps=125000,
            learning_rate=0.00176, num_warmup_steps=3125,
            gradient_accumulation_steps=8)
        assert (run_config.seed, run_config.mixed_precision,
                run_config.save_checkpoints_steps) == (5, "auto", 5000)
        assert (data.max_seq_length, data.max_predictions_per_seq,
                data.masking, data.masked_lm_prob) == (512, 20, "dynamic", 0.4)
    FLAGS.unparse_flags()
    # The library's defaults are the flags' (the original's), except the
    # precision, which the binary resolves from the hardware.
    for cls in (training.OptimizationConfig, training.RuntimeConfig,
                training.PretrainingDataConfig):
        for field in dataclasses.fields(cls):
            if field.name in FLAGS and field.name not in (
                    "mixed_precision", "max_seq_length",
                    "max_predictions_per_seq"):
                assert field.default == FLAGS[field.name].default, field.name


def test_init_checkpoint_of_another_size_is_refused_unless_partial_is_allowed(tmp_path, workdir, caplog):
    """Issue 36 F9: a hidden-32 model into this hidden-16 one (same embeddings) loaded 11 of 32 variables."""
    import logging

    if not FLAGS.is_parsed():
        FLAGS(["albert-pretrain"])
    source = str(tmp_path / "bigger")
    albert_tf.save_pretrained(albert_tf.AlbertPretrainer(tl.tiny_config(hidden_size=32)), source)
    values = dict(output_dir=str(tmp_path / "out"), preset=None, albert_config_file=str(workdir / "albert_config.json"),
                  input_file=str(workdir / "data" / "train-*.tfrecord"), spm_model_file=str(workdir / "vocab.model"),
                  init_checkpoint=source, do_train=True, do_eval=False, train_batch_size=8, max_seq_length=16,
                  max_predictions_per_seq=3, num_train_steps=1, num_warmup_steps=0, save_checkpoints_steps=1)
    with flagsaver.flagsaver(**values):
        with pytest.raises(SystemExit) as info:
            pretrain.main(["albert-pretrain"])
    assert str(info.value) == (
        f"albert-pretrain: --init_checkpoint={source!r} is a model of another shape: "
        "albert_encoder/embedding_projection/kernel has shape (8, 32) there and (8, 16) here (the first of the "
        "model's variables that does not match). Give a checkpoint of this model's config, or "
        "--allow_partial_init_checkpoint to warm-start only the variables that match.")
    assert not os.path.exists(tmp_path / "out" / "ckpt-1.index")
    with flagsaver.flagsaver(**dict(values, allow_partial_init_checkpoint=True)):
        with caplog.at_level(logging.WARNING):
            pretrain.main(["albert-pretrain"])
    line = [r.getMessage() for r in caplog.records if "Partial warm start" in r.getMessage()]
    assert len(line) == 1 and line[0].startswith(
        f"Partial warm start from {source} (--allow_partial_init_checkpoint): 11 of 32 variables loaded ("
        "albert_encoder/embeddings/word_embeddings, "), line
    assert "; 21 kept fresh: albert_encoder/embedding_projection/kernel, " in line[0]
    assert os.path.exists(tmp_path / "out" / "ckpt-1.index")
