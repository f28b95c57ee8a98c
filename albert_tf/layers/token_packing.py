"""Packed tokens: the dense layers of a block run on the real tokens only.

A batch of mixed-length text is padded to its longest row; every dense layer
(q/k/v/output projections and the FFN, nearly all of a block's work at
these lengths) then also runs on the padding. Packed, the hidden states are
one [N, H] matrix of the N real tokens; attention alone needs the [B, T]
layout, so its q, k and v are unpacked to it (a gather) and its context
packed back (a gather). Each token's result is the padded computation's:
dense layers and LayerNorm act row by row and padded keys are masked.

Position 0 of every row counts as a real token: rows are never empty, and
the [CLS] output the pooler reads is always computed. A row with no real
token at all (an all-padding filler row) is computed at every position: the
padded computation's [CLS] attends to all of that row's positions alike (its
keys are all masked), so packing only position 0 would give it another
pooled output (issue 29).
"""

from typing import NamedTuple

import tensorflow as tf


class TokenPacking(NamedTuple):
    """Where the real tokens of a [B, T] batch are in its flat [B*T] layout.

    Attributes:
        index: int32 [N], the flat positions of the real tokens, in order.
        unpack_index: int32 [B*T], each position's row in the packed [N]
            (a padding position points at its row's last real token before
            it, a finite value that the attention mask hides).
        mask: [B*T] bool, the positions computed: the real ones, position 0,
            and every position of a row without a real token.
    """

    index: tf.Tensor
    unpack_index: tf.Tensor
    mask: tf.Tensor


def token_packing(input_mask: tf.Tensor) -> TokenPacking:
    """The `TokenPacking` of an int/bool [B, T] mask (1 = real token).

    Example:
    >>> p = token_packing(tf.constant([[1, 1, 0], [1, 0, 0]]))
    >>> p.index.numpy().tolist(), p.unpack_index.numpy().tolist()
    ([0, 1, 3], [0, 1, 1, 2, 2, 2])
    >>> token_packing(tf.constant([[1, 0], [0, 0]])).index.numpy().tolist()  # an all-padding row: all of it
    [0, 2, 3]
    """
    real = tf.cast(input_mask, tf.bool)
    first = tf.equal(tf.range(tf.shape(real)[1]), 0)
    empty_row = tf.logical_not(tf.reduce_any(real, axis=1, keepdims=True))
    mask = tf.reshape(tf.logical_or(tf.logical_or(real, first[tf.newaxis, :]), empty_row), [-1])
    index = tf.cast(tf.reshape(tf.where(mask), [-1]), tf.int32)
    unpack_index = tf.cumsum(tf.cast(mask, tf.int32)) - 1
    return TokenPacking(index, unpack_index, mask)


def pack_tokens(x2d: tf.Tensor, packing: TokenPacking) -> tf.Tensor:
    """[B*T, W] -> [N, W], the real tokens' rows (the rank-3 view [1, B*T, W] -> [1, N, W] alike)."""
    return tf.gather(x2d, packing.index, axis=x2d.shape.rank - 2)


def unpack_tokens(packed: tf.Tensor, packing: TokenPacking) -> tf.Tensor:
    """[N, W] -> [B*T, W] (or [1, N, W] -> [1, B*T, W]); padding rows hold a copy of a real token's row."""
    return tf.gather(packed, packing.unpack_index, axis=packed.shape.rank - 2)


def unpack_tokens_zero_padding(packed: tf.Tensor, packing: TokenPacking) -> tf.Tensor:
    """[N, W] -> [B*T, W] with zeros at the padding positions."""
    rows = unpack_tokens(packed, packing)
    return rows * tf.cast(packing.mask, rows.dtype)[:, tf.newaxis]
