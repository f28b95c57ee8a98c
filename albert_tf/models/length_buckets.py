"""Inference in length buckets: no compute on the padding of mixed-length text.

A batch of raw text is padded to its longest row, so one long sentence makes
every short one pay for its length (and attention pays quadratically). Here
the rows are sorted by real length and run through the encoder a few rows at
a time, each bucket at its own longest length; the results go back to the
input order. Small buckets also keep the activations in cache: on a 2-core
AVX-512 CPU a [8, T] batch ran about 25% more tokens/s than a [32, T] one.
Outputs equal the single-batch ones: padded keys are masked either way
(float32: to rounding; bfloat16: to bfloat16 rounding, since the kernels see
other shapes).
"""

from __future__ import annotations

from typing import Callable, Dict, Mapping

import tensorflow as tf

BUCKETED_INPUTS = ("input_ids", "input_mask", "segment_ids")
# Rows per bucket: small enough to stay in cache and follow the lengths
# closely, large enough to keep the matmuls efficient (bench/results/performance_notes.md).
DEFAULT_ROWS_PER_BUCKET = 8


def pooled_output_in_buckets(encoder: Callable[..., Dict[str, tf.Tensor]],
                             features: Mapping[str, tf.Tensor],
                             rows_per_bucket: int = DEFAULT_ROWS_PER_BUCKET) -> tf.Tensor:
    """The encoder's `pooled_output` [B, H], computed in length-sorted buckets.

    Works eagerly and in a `tf.function` with any (dynamic) batch size (a
    `tf.while_loop` over the buckets, so the encoder is traced once).

    Args:
        encoder: an `AlbertEncoder` (called with `training=False, pooled_output_only=True`).
        features: `input_ids`, `input_mask`, `segment_ids`, int [B, T].
        rows_per_bucket: rows per encoder call.

    Returns:
        pooled_output [B, H] in the order of the input rows.

    Example:
    >>> import albert_tf
    >>> enc = albert_tf.AlbertEncoder(albert_tf.AlbertConfig.tiny())
    >>> ids = tf.constant([[2, 7, 3, 0, 0], [2, 7, 8, 9, 3]] * 2)
    >>> f = {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32), "segment_ids": tf.zeros_like(ids)}
    >>> pooled_output_in_buckets(enc, f, rows_per_bucket=2).shape
    TensorShape([4, 32])
    """
    if int(rows_per_bucket) < 1:
        raise ValueError(f"rows_per_bucket must be >= 1, got {rows_per_bucket!r}.")
    size = int(rows_per_bucket)
    features = dict(features)
    # As the encoder: a missing mask means every position is real.
    if features.get("input_mask") is None:
        features["input_mask"] = tf.ones_like(features["input_ids"])
    lengths = tf.reduce_sum(tf.cast(features["input_mask"], tf.int32), axis=1)
    order = tf.argsort(lengths, stable=True)
    sorted_lengths = tf.gather(lengths, order)
    sorted_inputs = {k: tf.gather(features[k], order) for k in BUCKETED_INPUTS if k in features}
    rows = tf.shape(lengths)[0]

    def bucket(i):
        start = i * size
        end = tf.minimum(start + size, rows)
        # [1] keeps the max defined (and T >= 1) for an empty batch.
        longest = tf.reduce_max(tf.concat([sorted_lengths[start:end], [1]], axis=0))
        inputs = {k: v[start:end, :longest] for k, v in sorted_inputs.items()}
        return encoder(inputs, training=False, pooled_output_only=True)["pooled_output"]

    num_buckets = tf.maximum((rows + size - 1) // size, 1)
    first = bucket(0)
    if tf.executing_eagerly():
        pooled = tf.concat([first] + [bucket(i) for i in range(1, int(num_buckets))], axis=0)
    else:
        parts = tf.TensorArray(first.dtype, size=num_buckets, infer_shape=False,
                               element_shape=tf.TensorShape([None]).concatenate(first.shape[1:]))
        parts = parts.write(0, first)
        _, parts = tf.while_loop(lambda i, _: i < num_buckets,
                                 lambda i, ta: (i + 1, ta.write(i, bucket(i))),
                                 (tf.constant(1), parts))
        pooled = parts.concat()
    return tf.gather(pooled, tf.argsort(order))
