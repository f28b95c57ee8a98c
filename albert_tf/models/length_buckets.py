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


def pooled_output_in_buckets(encoder: Callable[..., Dict[str, tf.Tensor]],
                             features: Mapping[str, tf.Tensor], num_buckets: int) -> tf.Tensor:
    """The encoder's `pooled_output` [B, H], computed in `num_buckets` length buckets.

    Works eagerly and in a `tf.function` with any (dynamic) batch size; a
    bucket left empty (B < num_buckets) costs nothing.

    Args:
        encoder: an `AlbertEncoder` (called with `training=False`).
        features: `input_ids`, `input_mask`, `segment_ids`, int [B, T].
        num_buckets: slices of the length-sorted batch (1: no bucketing).

    Returns:
        pooled_output [B, H] in the order of the input rows.

    Example:
    >>> import albert_tf
    >>> enc = albert_tf.AlbertEncoder(albert_tf.AlbertConfig.tiny())
    >>> ids = tf.constant([[2, 7, 3, 0, 0], [2, 7, 8, 9, 3]])
    >>> f = {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32), "segment_ids": tf.zeros_like(ids)}
    >>> pooled_output_in_buckets(enc, f, 2).shape
    TensorShape([2, 32])
    """
    if int(num_buckets) < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets!r}.")
    if num_buckets == 1:
        return encoder({k: features[k] for k in BUCKETED_INPUTS if k in features},
                       training=False)["pooled_output"]
    lengths = tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), axis=1)
    order = tf.argsort(lengths, stable=True)
    rows = tf.shape(lengths)[0]
    parts = []
    for k in range(num_buckets):
        index = order[(rows * k) // num_buckets:(rows * (k + 1)) // num_buckets]
        # [1] keeps the max defined (and T >= 1) when the bucket is empty.
        longest = tf.reduce_max(tf.concat([tf.gather(lengths, index), [1]], axis=0))
        bucket = {key: tf.gather(features[key], index)[:, :longest]
                  for key in BUCKETED_INPUTS if key in features}
        parts.append(encoder(bucket, training=False)["pooled_output"])
    return tf.gather(tf.concat(parts, axis=0), tf.argsort(order))
