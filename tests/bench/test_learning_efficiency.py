"""bench.studies.learning_efficiency: variant parsing, the small-model recipe, the shared held-out scorer, the table.

No training here (the benchmark itself trains); keras-hub is not needed.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

import flags.core_flags as albert_flags
import pipelines
from bench.studies import learning_efficiency as le

FLAGS = flags.FLAGS


def test_variant_specs_parse_and_name_bad_keys():
    v = le.Variant.parse("ours:lr=0.02:warmup=50:masking=dynamic:sop=0.5")
    assert (v.system, v.lr, v.warmup, v.masking, v.sop) == ("ours", 0.02, 50, "dynamic", 0.5)
    assert isinstance(v.warmup, int)
    assert le.Variant.parse("ours_mlm").sop == 0.0
    hub = le.Variant.parse("keras_hub:lr=0.001")
    assert (hub.system, hub.opt, hub.wd, hub.lr) == ("keras_hub", "keras_lamb", 0.0, 0.001)
    with pytest.raises(ValueError, match="unknown key 'lrate'"):
        le.Variant.parse("ours:lrate=1")
    with pytest.raises(ValueError, match="unknown system 'bert'"):
        le.Variant.parse("bert:lr=1")


def test_recipe_variant_is_what_albert_pretrain_reads_from_the_recipe():
    albert_flags.define_all_pretraining_flags()
    with flagsaver.flagsaver():
        FLAGS.unparse_flags()
        FLAGS(["albert-pretrain", f"--flagfile={le.RECIPE}"])
        optimization, _, data = albert_flags.pretraining_configs(FLAGS)
        recipe = le.Variant.parse("recipe")
        assert (recipe.opt, recipe.lr, recipe.warmup, recipe.power, recipe.wd, recipe.clip, recipe.masking,
                recipe.mask_rate) == (
            optimization.optimizer, optimization.learning_rate, optimization.num_warmup_steps,
            optimization.poly_power, optimization.weight_decay_rate, optimization.clip_norm, data.masking,
            data.masked_lm_prob)
        # The recipe also runs the study's full setting as albert-pretrain reads it: batch 32, 1,600 steps,
        # length 128 with 20 predictions (bench.studies.learning_efficiency's defaults without --quick).
        assert (optimization.train_batch_size, optimization.num_train_steps) == (32, 1600)
        assert (data.max_seq_length, data.max_predictions_per_seq) == (128, 20)
    FLAGS.unparse_flags()


def _write_records(path, rng, n=10, seq=8, preds=3):
    ids = rng.integers(5, 20, size=(n, seq))
    weights = np.ones((n, preds), np.float32)
    weights[::3, -1] = 0.0  # padding slots must not count
    features = {
        "input_ids": ids, "input_mask": np.ones((n, seq), np.int64), "segment_ids": np.zeros((n, seq), np.int64),
        "token_boundary": np.ones((n, seq), np.int64),
        "masked_lm_positions": np.tile(np.arange(1, preds + 1), (n, 1)),
        "masked_lm_ids": rng.integers(5, 20, size=(n, preds)), "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, size=(n, 1))}
    with tf.io.TFRecordWriter(path) as writer:
        for record in pipelines.serialize_examples(features).numpy():
            writer.write(record)
    return features


def test_heldout_metrics_match_numpy(tmp_path):
    rng = np.random.default_rng(0)
    feats = _write_records(str(tmp_path / "eval.tfrecord"), rng)
    vocab = 20
    table = rng.normal(size=(vocab,)).astype(np.float32)

    def predict(batch):  # logits depend on the label and the position: some right, some wrong
        ids = batch["masked_lm_ids"].numpy()
        logits = np.tile(table, ids.shape + (1,))
        hit = (np.arange(ids.shape[1])[None, :] % 2 == 0)
        np.put_along_axis(logits, ids[..., None], np.where(hit, 10.0, -10.0)[..., None], -1)
        sop = np.stack([np.zeros(len(ids)), np.ones(len(ids))], -1)  # always predicts 1
        return tf.constant(logits), sop

    got = le.heldout_metrics(predict, str(tmp_path / "*.tfrecord"), 8, 3, max_batches=10)
    # NumPy reference over all examples.
    w = feats["masked_lm_weights"]
    hit = np.tile(np.arange(3) % 2 == 0, (10, 1))
    logits = np.tile(table, (10, 3, 1))
    np.put_along_axis(logits, feats["masked_lm_ids"][..., None], np.where(hit, 10.0, -10.0)[..., None], -1)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, feats["masked_lm_ids"][..., None], -1)[..., 0]
    # Misses are right only when the table's argmax is the label itself (with -10 there it never is).
    assert got["mlm_acc"] == pytest.approx((w * hit).sum() / w.sum())
    assert got["mlm_loss"] == pytest.approx((w * nll).sum() / w.sum(), rel=1e-5)
    assert got["sop_acc"] == pytest.approx(feats["next_sentence_labels"].mean())
    assert (got["eval_examples"], got["eval_predictions"]) == (10, int(w.sum()))


def test_markdown_table_is_rebuilt_and_the_text_around_it_kept(tmp_path, monkeypatch):
    path = tmp_path / "le.md"
    monkeypatch.setattr(le, "MARKDOWN", str(path))
    record = dict(system="ours", spec="ours:lr=0.01", lr=0.01, warmup=100, steps=400, seq_len=64, mlm_acc=0.1,
                  mlm_loss=5.9, sop_acc=0.55, train_seconds=100.0, command_args="--quick --variants=ours:lr=0.01")
    le.write_markdown([record])
    text = path.read_text()
    path.write_text("# Title\n\nMy notes.\n\n" + text[text.index(le.TABLE_START):] + "\nAfter the table.\n")
    le.write_markdown([record, dict(record, spec="ours:lr=0.003", lr=0.003, mlm_acc=0.08, sop_acc=None)])
    text = path.read_text()
    assert text.startswith("# Title\n\nMy notes.") and text.rstrip().endswith("After the table.")
    assert "| 2 | ours | `ours:lr=0.003` | 0.003 | 100 | 400 | 64 | 0.0800 | 5.900 | - | - | 100 |" in text
    assert text.count(le.TABLE_START) == 1


def test_runs_whose_command_no_longer_reproduces_them_are_marked():
    old = dict(spec="recipe:precision=bfloat16", date="2026-11-29 16:46 UTC", mask_rate=0.0)
    assert "static 15%" in le.stale_reason(old)
    assert "older masking code" in le.stale_reason(dict(old, spec="ours:lr=0.01:mask_rate=0.4", mask_rate=0.4))
    assert le.stale_reason(dict(old, spec="keras_hub:lr=0.01")) == ""
    assert le.stale_reason(dict(old, date="2026-12-01 10:00 UTC")) == ""


def test_like_for_like_gives_both_systems_the_same_masking_rates_and_seeds():
    for masking in ("static", "dynamic"):
        parsed = [le.Variant.parse(s) for s in le.like_for_like_variants(masking)]
        by = {system: {(v.lr, v.seed, v.mask_rate, v.masking, v.precision) for v in parsed if v.system == system}
              for system in ("ours", "keras_hub")}
        assert by["ours"] == by["keras_hub"] and len(by["ours"]) == 9
        assert {v.seed for v in parsed} == {1, 2, 3} and {v.mask_rate for v in parsed} == {
            0.0 if masking == "static" else 0.4}
    with pytest.raises(ValueError, match="like_for_like"):
        le.like_for_like_variants("sometimes")


def test_span_of_run_numbers():
    assert le._span([1, 2, 3, 5, 7, 8]) == "1-3, 5, 7-8" and le._span([4]) == "4"
