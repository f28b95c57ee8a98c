"""AlbertTokenClassifier: per-token logits and the loss over labelled tokens."""

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from tests.albert_tf.task_testlib import tiny_config


def test_logits_per_token_and_masked_loss_against_numpy():
    tagger = albert_tf.AlbertTokenClassifier(tiny_config(), 3, tag_names=["O", "B", "I"])
    ids = tf.constant([[2, 17, 43, 3], [2, 9, 3, 0]])
    x = {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32)}
    logits = tagger(x)
    seq = tagger.encoder(x)["sequence_output"].numpy()
    w, b = tagger.head.output_weights.numpy(), tagger.head.output_bias.numpy()
    np.testing.assert_allclose(logits.numpy(), seq @ w.T + b, atol=1e-6)
    labels = np.array([[-1, 1, 2, -1], [-1, 0, -1, 2]])  # the last one is padding: ignored
    total, count = tagger.loss_terms(x, tf.constant(labels), logits)
    lg = logits.numpy()
    log_p = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    want = -(log_p[0, 1, 1] + log_p[0, 2, 2] + log_p[1, 1, 0])
    assert float(count) == 3
    assert float(total) == pytest.approx(want, rel=1e-5)


def test_fit_reduces_the_loss():
    tagger = albert_tf.AlbertTokenClassifier(tiny_config(), 2, dropout_rate=0.0)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 120, size=(8, 6)).astype(np.int32)
    labels = (ids % 2).astype(np.int32)  # a tag the token id decides
    data = tf.data.Dataset.from_tensor_slices(({"input_ids": ids}, labels)).batch(4)
    tagger.compile(optimizer=albert_tf.optimizers.adamw(1e-2))
    history = tagger.fit(data, epochs=4, verbose=0, shuffle=False)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert tagger.task_config["num_tags"] == 2
