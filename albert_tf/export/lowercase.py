"""The SavedModel's lower-casing (`tf.strings.lower`) as tables another runtime can apply.

The in-graph normalisation lower-cases with `tf.strings.lower(encoding="utf-8")`
(`pipelines.tokenizer.preprocess_text`), as the original's `str.lower()`: each
character's full lower-case mapping, except that a capital sigma Σ (U+03A3) at
the end of a word becomes ς (U+03C2), not σ (Unicode's Final_Sigma: a cased
letter before it, none after it, case-ignorable characters skipped). Case
folding, which openvino-tokenizers offers, is another mapping: it turns ς into
σ and lower-case Cherokee into upper-case, and has no final sigma.

The tables here are read from `tf.strings.lower` itself over every code point,
so the OpenVINO text model lower-cases with the exact mapping (and Unicode
version) of the SavedModel exported beside it:

- `lower_case_map()`: each character that lower-casing changes, alone, and
  what it becomes (Σ alone -> σ);
- `final_sigma_pattern()`: a PCRE2 pattern whose match, replaced by
  `FINAL_SIGMA_REPLACEMENT`, turns each word-final Σ into ς first (a cased
  character, then case-ignorable ones, then Σ, with no cased character after
  it but case-ignorable ones), the classes again read from `tf.strings.lower`.

Example:
>>> lower_case_map()[0x3A3], lower_case_map()[0x41]
('σ', 'a')
"""

from __future__ import annotations

import functools
from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

CAPITAL_SIGMA = "\u03a3"
FINAL_SIGMA = "\u03c2"
FINAL_SIGMA_REPLACEMENT = "$1" + FINAL_SIGMA
_ALPHA = "\u0391"  # a cased letter


_SEPARATOR = 0x20  # neither cased nor case-ignorable, and no character lower-cases to it
_CHUNK = 4096  # texts per string given to tf.strings.lower


def _code_points() -> np.ndarray:
    """Every code point but NUL (tf.strings.lower ends a string there), the separator and the surrogates."""
    codes = np.arange(1, 0x110000, dtype=np.int32)
    return codes[((codes < 0xD800) | (codes >= 0xE000)) & (codes != _SEPARATOR)]


def _lower_each(prefix: List[int], codes: np.ndarray, suffix: List[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tf.strings.lower of each text prefix + [code] + suffix: (code points, starts, stops), text i lower-cased
    is code points[starts[i]:stops[i]].

    The texts are lowered a few thousand at a time, each followed by a space
    (which separates their Final_Sigma contexts as the text's end does).
    """
    texts = np.concatenate([np.tile(np.asarray(prefix, np.int32), (len(codes), 1)).reshape(len(codes), -1),
                            codes[:, None],
                            np.tile(np.asarray(suffix, np.int32), (len(codes), 1)).reshape(len(codes), -1),
                            np.full([len(codes), 1], _SEPARATOR, np.int32)], axis=1)
    per_chunk = [min(_CHUNK, len(codes) - i) * texts.shape[1] for i in range(0, len(codes), _CHUNK)]
    chunks = tf.RaggedTensor.from_row_lengths(texts.reshape(-1), per_chunk)
    lowered = tf.strings.lower(tf.strings.unicode_encode(chunks, "UTF-8"), encoding="utf-8")
    flat = tf.strings.unicode_decode(lowered, "UTF-8").flat_values.numpy()
    stops = np.flatnonzero(flat == _SEPARATOR)
    if len(stops) != len(codes):
        raise RuntimeError(f"tf.strings.lower made {len(stops) - len(codes)} more spaces than it was given.")
    starts = np.concatenate([[0], stops[:-1] + 1])
    return flat, starts, stops


@functools.lru_cache(maxsize=None)
def lower_case_map() -> Dict[int, str]:
    """Code point -> its lower-case form as `tf.strings.lower` gives it for the character alone, where that differs.

    NUL is left out (`tf.strings.lower` ends a string there; the preprocessor keeps it).
    """
    codes = _code_points()
    flat, starts, stops = _lower_each([], codes, [])
    changed = np.flatnonzero((stops - starts != 1) | (flat[np.minimum(starts, len(flat) - 1)] != codes))
    return {int(codes[i]): "".join(map(chr, flat[starts[i]:stops[i]])) for i in changed}


def _ends_in_final_sigma(prefix: List[int], codes: np.ndarray) -> np.ndarray:
    flat, starts, stops = _lower_each(prefix, codes, [ord(CAPITAL_SIGMA)])
    return (stops > starts) & (flat[np.maximum(stops - 1, 0)] == ord(FINAL_SIGMA))


@functools.lru_cache(maxsize=None)
def final_sigma_classes() -> Tuple[Tuple[Tuple[int, int], ...], Tuple[Tuple[int, int], ...]]:
    """(cased, ignorable): code point ranges as `tf.strings.lower`'s Final_Sigma rule reads them.

    cased: a character X with "XΣ" -> "...ς" (cased and not case-ignorable);
    ignorable: X with "ΑXΣ" -> "...ς" that is not in cased (skipped when
    looking for a cased letter, before or after the Σ).
    """
    codes = _code_points()
    cased = _ends_in_final_sigma([], codes)
    ignorable = _ends_in_final_sigma([ord(_ALPHA)], codes) & ~cased
    return _ranges(codes[cased].tolist()), _ranges(codes[ignorable].tolist())


def _ranges(codes: List[int]) -> Tuple[Tuple[int, int], ...]:
    ranges: List[List[int]] = []
    for c in codes:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return tuple((a, b) for a, b in ranges)


def _char_class(ranges) -> str:
    return "[" + "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges) + "]"


@functools.lru_cache(maxsize=None)
def final_sigma_pattern() -> str:
    """A PCRE2 pattern: group 1 is the cased letter and the case-ignorable characters before a word-final Σ.

    Replacing its matches by `FINAL_SIGMA_REPLACEMENT` before lower-casing
    each character with `lower_case_map` gives `tf.strings.lower` of the text.
    """
    cased, ignorable = (_char_class(r) for r in final_sigma_classes())
    return f"({cased}{ignorable}*){CAPITAL_SIGMA}(?!{ignorable}*{cased})"


def lower_case_charsmap() -> bytes:
    """`lower_case_map` as a SentencePiece precompiled charsmap (the form openvino-tokenizers' CharsmapStep reads)."""
    import sentencepiece as spm

    normalizer = spm.SentencePieceNormalizer(norm_map=[(chr(c), low) for c, low in sorted(lower_case_map().items())])
    return _bytes_field(normalizer.serialized_normalizer_spec(), _PRECOMPILED_CHARSMAP_FIELD)


_PRECOMPILED_CHARSMAP_FIELD = 2  # sentencepiece_model.proto: NormalizerSpec.precompiled_charsmap


def _bytes_field(message: bytes, number: int) -> bytes:
    """A length-delimited field of a serialized protobuf message (without the generated module: sentencepiece's
    needs a newer protobuf runtime than TensorFlow's)."""

    def varint(i):
        value = shift = 0
        while True:
            byte = message[i]
            value |= (byte & 0x7F) << shift
            shift, i = shift + 7, i + 1
            if byte < 0x80:
                return value, i

    i = 0
    while i < len(message):
        key, i = varint(i)
        kind = key & 7
        if kind == 0:
            _, i = varint(i)
        elif kind == 2:
            size, i = varint(i)
            if key >> 3 == number:
                return message[i:i + size]
            i += size
        elif kind in (1, 5):
            i += 8 if kind == 1 else 4
        else:
            raise ValueError(f"Unexpected protobuf wire type {kind} in a SentencePiece normalizer spec.")
    raise ValueError(f"The SentencePiece normalizer spec has no field {number}.")
