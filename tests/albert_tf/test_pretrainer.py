import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf import training
from albert_tf.config import AlbertConfig
from albert_tf.models import encoder as encoder_lib
from albert_tf.models import pretrainer as pretrainer_lib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402


def _batch(batch=4, length=12, predictions=3, vocab=100, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(batch, length)).astype(np.int32)
    positions = np.sort(rng.choice(np.arange(1, length - 1), size=(batch, predictions)), axis=1).astype(np.int32)
    weights = np.ones((batch, predictions), np.float32)
    weights[0, -1] = 0.0  # one padded prediction slot
    return {
        "input_ids": ids,
        "input_mask": np.ones_like(ids),
        "segment_ids": np.zeros_like(ids),
        "token_boundary": np.ones_like(ids),
        "masked_lm_positions": positions,
        "masked_lm_ids": np.take_along_axis(ids, positions, axis=1),
        "masked_lm_weights": weights,
        "next_sentence_labels": (np.arange(batch) % 2).astype(np.int32),
    }


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_outputs_and_extra_keys_ignored():
    pre = albert_tf.AlbertPretrainer(AlbertConfig.tiny())
    out = pre(_batch())
    assert out["mlm_logits"].shape == (4, 3, 100)
    assert out["sop_logits"].shape == (4, 2)
    assert out["sequence_output"].shape == (4, 12, 32)
    assert pre.encoder is pre.layers[0] or isinstance(pre.encoder, albert_tf.AlbertEncoder)
    with pytest.raises(ValueError, match="masked_lm_positions"):
        pre({"input_ids": _batch()["input_ids"]})


def test_loss_terms_match_numpy_formula():
    pre = albert_tf.AlbertPretrainer(AlbertConfig.tiny())
    batch = _batch()
    out = pre(batch)
    terms = {k: float(v) for k, v in albert_tf.pretraining_loss_terms(batch, out).items()}
    losses = {k: float(v) for k, v in albert_tf.pretraining_losses(albert_tf.pretraining_loss_terms(batch, out)).items()}

    logp = _log_softmax(out["mlm_logits"].numpy().astype(np.float64))
    nll = -np.take_along_axis(logp, batch["masked_lm_ids"][..., None], -1)[..., 0]
    w = batch["masked_lm_weights"]
    mlm_loss = (w * nll).sum() / (w.sum() + 1e-5)
    sop_logp = _log_softmax(out["sop_logits"].numpy().astype(np.float64))
    sop_loss = -sop_logp[np.arange(4), batch["next_sentence_labels"]].mean()
    mlm_acc = (w * (logp.argmax(-1) == batch["masked_lm_ids"])).sum() / w.sum()

    assert terms["mlm_weight_sum"] == 11.0 and terms["num_examples"] == 4.0
    np.testing.assert_allclose(losses["mlm_loss"], mlm_loss, rtol=1e-5)
    np.testing.assert_allclose(losses["sop_loss"], sop_loss, rtol=1e-5)
    np.testing.assert_allclose(losses["loss"], mlm_loss + sop_loss, rtol=1e-5)
    np.testing.assert_allclose(losses["mlm_accuracy"], mlm_acc, rtol=1e-6)


def test_fit_learns_a_tiny_batch():
    keras.utils.set_random_seed(1)
    pre = albert_tf.AlbertPretrainer(AlbertConfig.tiny())
    pre.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    data = tf.data.Dataset.from_tensors(_batch(batch=8, seed=3)).repeat(60)
    history = pre.fit(data, epochs=1, verbose=0, shuffle=False).history
    assert set(history) >= {"loss", "mlm_loss", "sop_loss", "mlm_accuracy", "sop_accuracy"}
    first = pre.evaluate(tf.data.Dataset.from_tensors(_batch(batch=8, seed=3)), verbose=0, return_dict=True)
    # Memorizing one batch: the loss falls well below its initial value ln(V) + ln(2).
    assert first["loss"] < 0.5 * (np.log(100) + np.log(2))
    assert first["mlm_accuracy"] > 0.5


def _two_uneven_batches():
    """Two batches whose masked-LM weight sums differ (11 and 4)."""
    first, second = _batch(seed=1), _batch(seed=2)
    second["masked_lm_weights"] = np.zeros_like(second["masked_lm_weights"])
    second["masked_lm_weights"][:, 0] = 1.0
    return first, second


def test_fit_and_evaluate_report_ratios_over_all_batches():
    """Keras evaluate, the loop's `evaluate` and `pretraining_losses` of the
    summed terms agree: the masked-LM loss and accuracy are weighted by
    masked_lm_weights over everything seen, not means of batch means."""
    pre = albert_tf.AlbertPretrainer(AlbertConfig.tiny())
    pre.compile(optimizer="sgd")
    batches = _two_uneven_batches()
    sums = {}
    for b in batches:
        for k, v in albert_tf.pretraining_loss_terms(b, pre(b)).items():
            sums[k] = sums.get(k, 0.0) + float(v)
    want = {k: float(v) for k, v in albert_tf.pretraining_losses(sums).items()}
    # A mean of the two batch losses differs: the check can fail.
    per_batch = [float(albert_tf.pretraining_losses(albert_tf.pretraining_loss_terms(b, pre(b)))["mlm_loss"])
                 for b in batches]
    assert abs(np.mean(per_batch) - want["mlm_loss"]) > 1e-3

    dataset = tf.data.Dataset.from_tensors(batches[0]).concatenate(tf.data.Dataset.from_tensors(batches[1]))
    got = pre.evaluate(dataset, verbose=0, return_dict=True)
    loop = training.evaluate(pre, lambda ctx: dataset)
    names = dict(loss="loss", mlm_loss="masked_lm_loss", sop_loss="sentence_order_loss",
                 mlm_accuracy="masked_lm_accuracy", sop_accuracy="sentence_order_accuracy")
    for key, name in names.items():
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
        np.testing.assert_allclose(loop[name], want[key], rtol=1e-5, err_msg=name)


def test_pretraining_features_are_the_tfrecord_contract_names():
    import pipelines

    names = pretrainer_lib.PRETRAINING_FEATURES
    assert names[:3] == encoder_lib.ENCODER_INPUTS
    # The TFRecord feature order, less token_boundary (the model does not read it).
    assert names == tuple(n for n in pipelines.FEATURE_NAMES if n != "token_boundary")
    # The loop's input check names what is missing from that one list.
    spec = {k: tf.TensorSpec([None, 4], tf.int32) for k in names if k != "masked_lm_ids"}
    with pytest.raises(training.TrainingError, match="masked_lm_ids"):
        training.step.check_element_spec(spec, None, None, None)


def test_fit_step_under_mirrored_equals_one_device(tmp_path):
    """One fit step on 2 logical-CPU replicas = one step on one device with
    the same global batch: the loss uses global denominators (the replicas'
    mlm weight sums differ here: 11 vs 4), not a mean of replica losses."""
    keras.utils.set_random_seed(3)
    config = tl.tiny_config()
    model = albert_tf.AlbertPretrainer(config)
    init = {v.path: v.numpy() for v in model.weights}
    first, second = (_batch(length=tl.SEQ, seed=s) for s in (1, 2))
    second["masked_lm_weights"][:] = 0.0
    second["masked_lm_weights"][:, 0] = 1.0
    batch = {k: np.concatenate([first[k], second[k]]) for k in first}
    np.savez(tmp_path / "init.npz", **init)
    np.savez(tmp_path / "batch.npz", **batch)

    # The reference: one SGD step by hand on the whole batch.
    with tf.GradientTape() as tape:
        terms = albert_tf.pretraining_loss_terms(batch, model(batch, training=True))
        loss = albert_tf.pretraining_losses(terms)["loss"]
    grads = tape.gradient(loss, model.trainable_variables)
    want = {v.path: v.numpy() - tf.convert_to_tensor(g).numpy() for v, g in zip(model.trainable_variables, grads)}

    args = dict(mode="fit_step", strategy="mirrored", logical_cpus=2,
                init=str(tmp_path / "init.npz"), batch_file=str(tmp_path / "batch.npz"),
                dump=str(tmp_path / "mirrored.npz"))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "training_worker.py"), json.dumps(args)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = dict(np.load(tmp_path / "mirrored.npz"))
    assert int(got["replicas"]) == 2
    np.testing.assert_allclose(float(got["reported_loss"]), float(loss), rtol=1e-5)
    moved = 0
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-6, err_msg=key)
        moved += bool(np.max(np.abs(value - init[key])) > 1e-4)
    assert moved > len(want) // 2
