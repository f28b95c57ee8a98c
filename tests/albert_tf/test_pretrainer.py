import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.config import AlbertConfig


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
