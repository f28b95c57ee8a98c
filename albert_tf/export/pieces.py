"""Piece tables and SentencePiece-free decoding (ids-only exports hold no SentencePiece op)."""

from __future__ import annotations

from typing import List, Sequence

import tensorflow as tf

SPIECE_UNDERLINE = "\u2581"


def decoding_table(pieces: Sequence[str]) -> List[str]:
    """The text each piece decodes to, as SentencePiece's decoder writes it.

    Special pieces (<pad>, [CLS], [SEP], [MASK]) decode to nothing and <unk>
    to " \u2047 "; the others keep their U+2581 word-start mark (see
    `decode_pieces`).
    """
    table = list(pieces)
    for i, piece in enumerate(table[:5]):
        table[i] = " \u2047 " if piece == "<unk>" else ""
    return table


def decode_pieces(table: tf.Tensor, ids: tf.RaggedTensor) -> tf.Tensor:
    """Ragged ids [B, None] -> text [B], with string ops only (no SentencePiece op).

    Joins the ids' entries of `table` (a `decoding_table`), drops the first
    word-start mark U+2581 and turns the others into spaces, as
    SentencePiece's decoder does.

    Example:
    >>> decode_pieces(tf.constant(["", "\u2581ka", "lo", "\u2581mi"]),
    ...               tf.ragged.constant([[1, 2, 3], []])).numpy().tolist()
    [b'kalo mi', b'']
    """
    text = tf.strings.reduce_join(tf.gather(table, ids), axis=-1)
    text = tf.strings.regex_replace(text, "^" + SPIECE_UNDERLINE, "")
    return tf.strings.regex_replace(text, SPIECE_UNDERLINE, " ")
