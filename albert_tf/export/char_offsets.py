"""Where each SentencePiece piece of a text lies in the ORIGINAL text, in graph ops.

The span-QA export answers with a substring of the context as the client sent
it (case, accents, characters outside the vocabulary and all), as the SQuAD
post-processing (`pipelines.finetune.squad.postprocess_predictions`) does,
not with decoded pieces. The in-graph normalisation
(`pipelines.tokenizer.preprocess_text`) acts character by character except
for whitespace runs (collapsed, stripped) and, with normalization="xlnet",
the pairs `` and '' (one "): `normalized_segments` rebuilds it one original
character at a time, so each byte of the normalised text knows the character
it came from. SentencePiece's `tokenize_with_offsets` gives each piece's bytes
in the normalised text; together they give each piece's first and last
character in the original text.

Offsets are in characters (Unicode code points, as Python's `str` indexes
them) of the text as the preprocessor reads it: bytes that are not valid
UTF-8 are dropped first. Lower-casing is the one step that depends on
context (a word-final capital sigma becomes ς): each character's part is cut
from the whole row lower-cased (`_lowered_in_context`).
A row whose per-character rebuild differs from the whole-text normalisation
(never seen on valid UTF-8; see the tests) is marked `aligned = False`, and
the span-QA export answers it with no answer rather than a text that is not
the context's.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.layers.preprocessor import cut_text
from pipelines import tokenizer as sp_tokenizer


class PieceOffsets(NamedTuple):
    """The pieces of a batch of texts and where they are in the original text.

    Attributes:
        ids: ragged int32 [B, P], the piece ids (the preprocessor's
            `tokenize(text, max_pieces)`).
        first_char, last_char: ragged int32 [B, P], each piece's first and
            last character (inclusive) in the original text.
        chars: ragged tf.string [B, C], the original text's characters (of
            the text cut to max_pieces * CHARS_PER_PIECE characters).
        is_space: ragged bool [B, C], which characters are whitespace (as
            Python's `str.strip` sees it).
        aligned: bool [B], the per-character rebuild equals the whole-text
            normalisation (the offsets can be trusted).
    """

    ids: tf.RaggedTensor
    first_char: tf.RaggedTensor
    last_char: tf.RaggedTensor
    chars: tf.RaggedTensor
    is_space: tf.RaggedTensor
    aligned: tf.Tensor


def _flat_row_index(ragged: tf.RaggedTensor) -> tf.Tensor:
    """For each flat value, its position inside its row."""
    return tf.cast(tf.range(tf.size(ragged.flat_values, out_type=tf.int64)) -
                   tf.gather(ragged.row_starts(), ragged.value_rowids()), tf.int32)


def _pair_quotes(flat: tf.Tensor, is_row_start: tf.Tensor) -> tf.Tensor:
    """XLNet's ``/'' -> " on flat characters: the first of each pair becomes ", the second ""."""
    index = tf.range(tf.shape(flat)[0])
    previous = tf.concat([[""], flat[:-1]], axis=0)
    starts_run = tf.logical_or(is_row_start, tf.not_equal(flat, previous))
    run = tf.cumsum(tf.cast(starts_run, tf.int32)) - 1
    run_start = tf.math.unsorted_segment_min(index, run, tf.shape(flat)[0])
    in_run = index - tf.gather(run_start, run)
    following = tf.concat([flat[1:], [""]], axis=0)
    next_same = tf.logical_and(tf.equal(flat, following),
                               tf.logical_not(tf.concat([is_row_start[1:], [True]], axis=0)))
    quote = tf.logical_or(tf.equal(flat, "`"), tf.equal(flat, "'"))
    first = tf.logical_and(quote, tf.logical_and(tf.equal(in_run % 2, 0), next_same))
    second = tf.logical_and(quote, tf.equal(in_run % 2, 1))
    return tf.where(first, '"', tf.where(second, "", flat))


def normalized_segments(chars: tf.RaggedTensor, do_lower_case: bool, normalization: str):
    """What each original character becomes in `preprocess_text`'s output.

    Args:
        chars: ragged tf.string [B, C], one character per value.
        do_lower_case, normalization: the preprocessor's settings.

    Returns:
        (segments, is_space): ragged tf.string [B, C] (joined per row they
        spell `preprocess_text` of the text) and ragged bool [B, C].

    Example:
    >>> seg, _ = normalized_segments(tf.strings.unicode_split([" Ca fé  X "], "UTF-8"), True, "original")
    >>> [s.decode("utf-8") for s in seg.to_list()[0]]
    ['', 'c', 'a', ' ', 'f', 'e', ' ', '', 'x', '']
    """
    sp_tokenizer.check_normalization(normalization)
    flat = chars.flat_values
    space = tf.strings.regex_full_match(flat, sp_tokenizer._WHITESPACE_RE)
    index = _flat_row_index(chars)
    row_start = tf.equal(index, 0)
    # A whitespace run becomes one space when text lies before and after it (split + join).
    rows = tf.cast(chars.value_rowids(), tf.int32)
    text = tf.cast(tf.logical_not(space), tf.int32)
    seen = tf.cumsum(text, exclusive=True)
    before = seen - tf.gather(seen, tf.gather(tf.cast(chars.row_starts(), tf.int32), rows))
    row_total = tf.math.unsorted_segment_sum(text, rows, chars.nrows(tf.int32))
    after = tf.gather(row_total, rows) - before - text
    first_of_run = tf.logical_or(row_start, tf.logical_not(tf.concat([[False], space[:-1]], axis=0)))
    kept_space = space & first_of_run & (before > 0) & (after > 0)
    segments = flat
    if normalization == "xlnet":
        segments = _pair_quotes(flat, row_start)
    segments = sp_tokenizer.drop_combining_marks(tf_text.normalize_utf8(segments, "NFKD"))
    segments = tf.where(tf.equal(flat, "\x00"), "\x00", segments)  # string ops end a string at NUL
    segments = tf.where(space, tf.where(kept_space, " ", ""), segments)
    if do_lower_case:
        segments = _lowered_in_context(chars.with_flat_values(segments))
    return chars.with_flat_values(segments), chars.with_flat_values(space)


def _lowered_in_context(segments: tf.RaggedTensor) -> tf.Tensor:
    """Each segment lower-cased as it is inside its whole row: flat tf.string.

    Lower-casing depends on context in one place: a capital sigma at the end
    of a word becomes ς, elsewhere σ (Final_Sigma; "ΟΔΟΣ" -> "οδος", a lone
    "Σ" -> "σ"). Each segment lower-cased alone has the byte length it has in
    the whole row lower-cased (σ and ς are two bytes each), so the row is
    lower-cased whole, as `preprocess_text` does, and cut at those lengths.
    A row where the lengths do not add up keeps the segments lower-cased
    alone (and is then not aligned).
    """
    flat = segments.flat_values
    alone = tf.where(tf.equal(flat, "\x00"), "\x00", tf.strings.lower(flat, encoding="utf-8"))
    whole = sp_tokenizer._lower_keeping_nul(tf.strings.reduce_join(segments, axis=-1))
    length = tf.strings.length(alone)
    rows = tf.cast(segments.value_rowids(), tf.int32)
    row_lengths = tf.math.unsorted_segment_sum(length, rows, segments.nrows(tf.int32))
    # Each row's bytes, cut back into its segments by a segment join (memory linear in the text: a
    # row gathered once per character would be quadratic). A row that does not fit is its segments alone.
    fits = tf.equal(row_lengths, tf.strings.length(whole))
    source = tf.where(fits, whole, tf.strings.reduce_join(segments.with_flat_values(alone), axis=-1))
    byte_segment = tf.repeat(tf.range(tf.size(length)), length)
    return tf.strings.unsorted_segment_join(tf.strings.bytes_split(source).flat_values, byte_segment,
                                            tf.size(length))


def piece_offsets(sentencepiece: tf_text.SentencepieceTokenizer, resplit, text: tf.Tensor, max_pieces: int,
                  do_lower_case: bool, normalization: str) -> PieceOffsets:
    """Pieces of `text` (as `AlbertTextPreprocessor.tokenize(text, max_pieces)`) with their characters.

    Args:
        sentencepiece: a tensorflow_text tokenizer of the preprocessor's
            SentencePiece model (out_type int32).
        resplit: None, or the vocabulary's re-split table as a ragged int32
            constant (`SentencePieceVocab.resplit`, pieces ending "<digit>,").
        text: tf.string [B].
        max_pieces: the text is cut to max_pieces * CHARS_PER_PIECE characters first.
        do_lower_case, normalization: the preprocessor's settings.

    Returns:
        `PieceOffsets`.
    """
    # As `AlbertTextPreprocessor.tokenize(text, max_pieces)`: invalid UTF-8 bytes dropped, then the cut.
    drop_invalid = getattr(sp_tokenizer, "drop_invalid_utf8", None)
    text = cut_text(text if drop_invalid is None else drop_invalid(text), max_pieces)
    normalized = sp_tokenizer.preprocess_text(text, do_lower_case, normalization)
    chars = tf.strings.unicode_split(text, "UTF-8")
    segments, space = normalized_segments(chars, do_lower_case, normalization)
    aligned = tf.equal(tf.strings.reduce_join(segments, axis=-1), normalized)
    ids, starts, ends = sentencepiece.tokenize_with_offsets(normalized)
    ids, starts, ends = (tf.cast(t, tf.int32) for t in (ids, starts, ends))
    if resplit is not None:
        ids, starts, ends = _resplit(resplit, ids, starts, ends)
    # Normalised byte -> original character (within its row).
    seg_bytes = tf.strings.length(segments.flat_values)
    char_of_byte = tf.repeat(_flat_row_index(chars), seg_bytes)
    char_of_byte = tf.concat([char_of_byte, [0]], axis=0)  # a valid index past the end (unaligned rows)
    row_bytes = tf.math.unsorted_segment_sum(seg_bytes, tf.cast(chars.value_rowids(), tf.int32), chars.nrows(tf.int32))
    byte_start = tf.cumsum(row_bytes, exclusive=True)
    rows = tf.cast(ids.value_rowids(), tf.int32)
    limit = tf.maximum(tf.gather(row_bytes, rows) - 1, 0)
    total = tf.shape(char_of_byte)[0] - 1

    def char_at(byte):
        flat = tf.gather(byte_start, rows) + tf.clip_by_value(byte, 0, limit)
        return tf.gather(char_of_byte, tf.minimum(flat, total))

    first = char_at(starts.flat_values)
    last = char_at(tf.maximum(ends.flat_values - 1, starts.flat_values))
    return PieceOffsets(ids, ids.with_flat_values(first), ids.with_flat_values(last), chars, space, aligned)


def _resplit(table: tf.RaggedTensor, ids, starts, ends):
    """The original's digit-comma re-split, with offsets: the trailing "," gets its byte, the rest the others."""
    parts = tf.gather(table, ids.flat_values)  # [N, None]
    count = tf.gather(tf.cast(parts.row_lengths(), tf.int32), parts.value_rowids())
    position = _flat_row_index(parts)
    start = tf.gather(starts.flat_values, parts.value_rowids())
    end = tf.gather(ends.flat_values, parts.value_rowids())
    split = count > 1
    last = tf.equal(position, count - 1)
    new_start = tf.where(split & last, end - 1, start)
    new_end = tf.where(split & ~last, end - 1, end)

    def nest(values):
        return ids.with_flat_values(parts.with_flat_values(values)).merge_dims(-2, -1)

    return nest(parts.flat_values), nest(new_start), nest(new_end)


def has_text(offsets: PieceOffsets) -> tf.RaggedTensor:
    """bool [B, P]: does the piece's span of the original text hold a non-whitespace character?

    The SQuAD post-processing skips spans whose text is empty once stripped
    (a lone word-start piece over a space); serving skips them too.

    Args:
        offsets: `piece_offsets` of the texts.

    Returns:
        A ragged bool tensor shaped like `offsets.ids`.
    """
    count = tf.cast(tf.logical_not(offsets.is_space), tf.int32)
    counts = tf.concat([tf.zeros([count.nrows(), 1], tf.int32), tf.cumsum(count.to_tensor(0), axis=1)], axis=1)
    rows = tf.cast(offsets.ids.value_rowids(), tf.int32)
    first, last = offsets.first_char.flat_values, offsets.last_char.flat_values
    inside = (tf.gather_nd(counts, tf.stack([rows, last + 1], axis=1)) -
              tf.gather_nd(counts, tf.stack([rows, first], axis=1)))
    return offsets.ids.with_flat_values(inside > 0)


def answer_text(offsets: PieceOffsets, example: tf.Tensor, start: tf.Tensor, end: tf.Tensor, found: tf.Tensor):
    """The original characters of pieces start..end of each example, whitespace stripped.

    Args:
        offsets: `piece_offsets` of the contexts.
        example, start, end: int32 [N]: the context, its first and last piece.
        found: bool [N]: whether there is an answer.

    Returns:
        (answer tf.string [N], start_char int32 [N], end_char int32 [N]):
        context[start_char:end_char] == answer; "" and -1, -1 where not
        found or where the context's offsets are not aligned.
    """
    ok = tf.logical_and(found, tf.gather(offsets.aligned, example))
    # At least one column: gather_nd needs one even when no context has a piece.
    first = tf.pad(offsets.first_char.to_tensor(0), [[0, 0], [0, 1]])
    last = tf.pad(offsets.last_char.to_tensor(-1), [[0, 0], [0, 1]], constant_values=-1)
    piece = lambda t, s: tf.gather_nd(t, tf.stack([example, tf.maximum(s, 0)], axis=1))  # noqa: E731
    lo = tf.where(ok, piece(first, start), 0)
    hi = tf.where(ok, piece(last, end), -1)
    space = tf.gather(offsets.is_space.to_tensor(True), example)  # [N, C]
    position = tf.range(tf.shape(space)[1])[tf.newaxis, :]
    text_here = tf.logical_and(tf.logical_not(space), (position >= lo[:, None]) & (position <= hi[:, None]))
    big = tf.int32.max
    a = tf.reduce_min(tf.where(text_here, position, big), axis=1)
    b = tf.reduce_max(tf.where(text_here, position, -1), axis=1)
    ok = tf.logical_and(ok, b >= 0)
    a, b = tf.where(ok, a, 0), tf.where(ok, b + 1, 0)
    rows = tf.gather(tf.cast(offsets.chars.row_starts(), tf.int32), example)
    span = tf.ragged.range(rows + a, rows + b)
    answer = tf.strings.reduce_join(tf.gather(offsets.chars.flat_values, span), axis=-1)
    return tf.where(ok, answer, ""), tf.where(ok, a, -1), tf.where(ok, b, -1)
