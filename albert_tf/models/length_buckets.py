"""Inference in length buckets: no compute on the padding of mixed-length text.

A batch of raw text is padded to its longest row, so one long sentence makes
every short one pay for its length (and attention pays quadratically). Here
the rows are sorted by real length and cut into a few equal slices; each
slice runs the encoder at its own longest length, and the results go back to
the input order. Outputs equal the single-batch ones: padded keys are masked
either way (float32: to rounding; bfloat16: to bfloat16 rounding, since the
kernels see other shapes).
"""

from __future__ import annotations

from typing import Callable, Dict, Mapping

import tensorflow as tf

BUCKETED_INPUTS = ("input_ids", "input_mask", "segment_ids")
# Batches of fewer than this many rows per bucket run as one batch.
MIN_ROWS_PER_BUCKET = 2


def pooled_output_in_buckets(encoder: Callable[..., Dict[str, tf.Tensor]],
                             features: Mapping[str, tf.Tensor], num_buckets: int) -> tf.Tensor:
    """The encoder's `pooled_output` [B, H], computed in `num_buckets` length buckets.

    Works eagerly and in a `tf.function` with any (dynamic) batch size;
    batches of fewer than MIN_ROWS_PER_BUCKET * num_buckets rows run whole.

    Args:
        encoder: an `AlbertEncoder` (called with `training=False`).
        features: `input_ids`, `input_mask`, `segment_ids`, int [B, T].
        num_buckets: slices of the length-sorted batch (1: no bucketing).

    Returns:
        pooled_output [B, H] in the order of the input rows.

    Example:
    >>> import albert_tf
    >>> enc = albert_tf.AlbertEncoder(albert_tf.AlbertConfig.tiny())
    >>> ids = tf.constant([[2, 7, 3, 0, 0], [2, 7, 8, 9, 3]] * 2)
    >>> f = {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32), "segment_ids": tf.zeros_like(ids)}
    >>> pooled_output_in_buckets(enc, f, 2).shape
    TensorShape([4, 32])
    """
    if int(num_buckets) < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets!r}.")
    inputs = {k: features[k] for k in BUCKETED_INPUTS if k in features}

    def single_batch():
        return encoder(inputs, training=False)["pooled_output"]

    if num_buckets == 1:
        return single_batch()
    lengths = tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), axis=1)
    rows = tf.shape(lengths)[0]

    def in_buckets():
        order = tf.argsort(lengths, stable=True)
        parts = []
        for k in range(num_buckets):
            index = order[(rows * k) // num_buckets:(rows * (k + 1)) // num_buckets]
            # [1] keeps the max defined (and T >= 1) when the bucket is empty.
            longest = tf.reduce_max(tf.concat([tf.gather(lengths, index), [1]], axis=0))
            bucket = {key: tf.gather(value, index)[:, :longest] for key, value in inputs.items()}
            parts.append(encoder(bucket, training=False)["pooled_output"])
        return tf.gather(tf.concat(parts, axis=0), tf.argsort(order))

    # Small batches (a single request) gain nothing from buckets of one or
    # two rows and would pay for the extra calls.
    enough = rows >= MIN_ROWS_PER_BUCKET * num_buckets
    if tf.executing_eagerly():
        return in_buckets() if bool(enough) else single_batch()
    return tf.cond(enough, in_buckets, single_batch)
