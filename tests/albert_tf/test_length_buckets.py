"""albert_tf.models.length_buckets: the same pooled output as one padded batch."""

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.models.length_buckets import pooled_output_in_buckets


def _features(lengths, width, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), width), "int32")
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(5, 100, size=n)
    ids = tf.constant(ids)
    segments = tf.constant((np.arange(width)[None, :] >= 3).repeat(len(lengths), 0).astype("int32"))
    return {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32), "segment_ids": segments * tf.cast(ids > 0, tf.int32)}


@pytest.fixture(scope="module")
def encoder():
    return albert_tf.AlbertEncoder(albert_tf.AlbertConfig.tiny())


@pytest.mark.parametrize("lengths,buckets", [
    ([3, 12, 5, 9, 12, 2, 7], 3),   # unsorted, ties, uneven slices
    ([6, 4, 9, 1, 2], 2),            # uneven: slices of 2 and 3 rows
    ([6, 4], 4),                     # too few rows: one batch
    ([8], 2),
])
def test_bucketed_equals_one_padded_batch(encoder, lengths, buckets):
    features = _features(lengths, 12)
    want = encoder(features, training=False)["pooled_output"].numpy()
    got = pooled_output_in_buckets(encoder, features, buckets).numpy()
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_each_bucket_runs_at_its_own_longest_length(encoder):
    seen = []

    def recording(inputs, training=False):
        seen.append((int(inputs["input_ids"].shape[0]), int(inputs["input_ids"].shape[1])))
        return encoder(inputs, training=training)

    pooled_output_in_buckets(recording, _features([2, 10, 3, 12], 16), 2)
    assert seen == [(2, 3), (2, 12)]  # lengths 2, 3 then 10, 12; never the padded 16


def test_small_batches_run_whole(encoder):
    seen = []

    def recording(inputs, training=False):
        seen.append(tuple(inputs["input_ids"].shape))
        return encoder(inputs, training=training)

    pooled_output_in_buckets(recording, _features([2, 10, 3], 16), 2)
    assert seen == [(3, 16)]


def test_in_a_tf_function_with_dynamic_batch(encoder):
    fn = tf.function(lambda f: pooled_output_in_buckets(encoder, f, 3),
                     input_signature=[{k: tf.TensorSpec([None, None], tf.int32)
                                       for k in ("input_ids", "input_mask", "segment_ids")}])
    for lengths in ([4, 1, 9], [5, 5, 2, 8, 3, 11, 1]):
        features = _features(lengths, 11)
        np.testing.assert_allclose(fn(features).numpy(),
                                   encoder(features, training=False)["pooled_output"].numpy(), atol=2e-5)


def test_bad_bucket_count(encoder):
    with pytest.raises(ValueError, match="num_buckets must be >= 1, got 0"):
        pooled_output_in_buckets(encoder, _features([3], 4), 0)
