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
    mask = tf.cast(ids > 0, tf.int32)
    segments = tf.constant((np.arange(width)[None, :] >= 3).repeat(len(lengths), 0).astype("int32"))
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments * mask}


@pytest.fixture(scope="module")
def encoder():
    return albert_tf.AlbertEncoder(albert_tf.AlbertConfig.tiny())


@pytest.mark.parametrize("lengths,size", [
    ([3, 12, 5, 9, 12, 2, 7], 3),   # unsorted, ties, a last bucket of one row
    ([6, 4], 8),                     # fewer rows than a bucket
    ([8], 1),
])
def test_bucketed_equals_one_padded_batch(encoder, lengths, size):
    features = _features(lengths, 12)
    want = encoder(features, training=False)["pooled_output"].numpy()
    got = pooled_output_in_buckets(encoder, features, size).numpy()
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_each_bucket_runs_at_its_own_longest_length(encoder):
    seen = []

    def recording(inputs, training=False, pooled_output_only=False):
        seen.append((tuple(inputs["input_ids"].shape), pooled_output_only))
        return encoder(inputs, training=training, pooled_output_only=pooled_output_only)

    pooled_output_in_buckets(recording, _features([2, 10, 3, 12, 1], 16), 2)
    # sorted lengths 1, 2 | 3, 10 | 12: never the padded 16
    # and the last block at [CLS] only: the pooled output is all a bucket gives back
    assert seen == [((2, 2), True), ((2, 10), True), ((1, 12), True)]


def test_in_a_tf_function_with_dynamic_batch(encoder):
    fn = tf.function(lambda f: pooled_output_in_buckets(encoder, f, 2),
                     input_signature=[{k: tf.TensorSpec([None, None], tf.int32)
                                       for k in ("input_ids", "input_mask", "segment_ids")}])
    for lengths in ([4, 1, 9], [5, 5, 2, 8, 3, 11, 1], [6]):
        features = _features(lengths, 11)
        np.testing.assert_allclose(fn(features).numpy(),
                                   encoder(features, training=False)["pooled_output"].numpy(), atol=2e-5)


def test_bad_bucket_size(encoder):
    with pytest.raises(ValueError, match="rows_per_bucket must be >= 1, got 0"):
        pooled_output_in_buckets(encoder, _features([3], 4), 0)


def test_classifier_inference_runs_in_buckets_with_unchanged_predictions():
    clf = albert_tf.AlbertClassifier(albert_tf.AlbertConfig.tiny(), num_classes=3)
    assert clf.inference_rows_per_bucket == 8
    features = _features([3, 12, 5, 9, 12, 2, 7, 4, 11, 6], 12)
    bucketed = clf(features, training=False).numpy()
    predicted = clf.predict(features, batch_size=10, verbose=0)
    clf.inference_rows_per_bucket = None  # one padded batch
    np.testing.assert_allclose(bucketed, clf(features, training=False).numpy(), atol=2e-5)
    np.testing.assert_allclose(predicted, bucketed, atol=2e-5)


def test_ids_without_a_mask_count_every_position(encoder):
    ids = tf.constant([[2, 7, 3], [2, 8, 3]])
    bucketed = pooled_output_in_buckets(encoder, {"input_ids": ids}, rows_per_bucket=1)
    whole = encoder({"input_ids": ids}, training=False)["pooled_output"]
    np.testing.assert_allclose(bucketed.numpy(), whole.numpy(), atol=1e-6)
