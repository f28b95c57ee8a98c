"""AlbertTextPreprocessor: raw strings -> packed ALBERT id tensors, in the graph.

The original fine-tuning scripts normalise text (`preprocess_text`), cut it
into SentencePiece ids and pack `[CLS] A [SEP] (B [SEP])` in Python. This layer
does the same with TensorFlow ops so that task models and SavedModels take raw
strings. The packing helpers below (`truncate_pair_longest_first`,
`keep_first`, `keep_last`, `pack_segments`) also serve the task models whose
truncation differs (multiple choice, span QA).
"""

from __future__ import annotations

import base64
from typing import Dict, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from pipelines import tokenizer as sp_tokenizer

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
# Raw text is cut to this many characters per piece it may yield before it is
# normalised, so that a huge request costs no more than a long one. A piece
# holds at most 16 characters of normalised text (SentencePiece's default
# max_sentencepiece_length); 64 leaves 48 characters per piece for what the
# normalisation removes (runs of whitespace, combining marks). Only text that
# averages more than that over its first pieces loses pieces it would keep.
CHARS_PER_PIECE = 64


def cut_text(text: tf.Tensor, max_pieces, keep: str = "first") -> tf.Tensor:
    """The first (or last) `max_pieces * CHARS_PER_PIECE` characters of each string.

    Args:
        text: tf.string, valid UTF-8.
        max_pieces: the pieces the caller keeps at most.
        keep: "first" (the caller keeps the first pieces) or "last".

    Example:
    >>> cut_text(tf.constant(["é" * 200, "ab"]), 2).numpy()[0].decode("utf-8") == "é" * 128
    True
    >>> cut_text(tf.constant(["a" * 100 + "b" * 64]), 1, keep="last").numpy().tolist() == [b"b" * 64]
    True
    """
    limit = tf.cast(max_pieces, tf.int32) * CHARS_PER_PIECE
    if keep == "first":
        return tf.strings.substr(text, 0, limit, unit="UTF8_CHAR")
    if keep != "last":
        raise ValueError(f"keep must be 'first' or 'last', got {keep!r}.")
    start = tf.maximum(0, tf.strings.length(text, unit="UTF8_CHAR") - limit)
    return tf.strings.substr(text, start, tf.fill(tf.shape(start), limit), unit="UTF8_CHAR")


# --------------------------------------------------------------- truncation
def _row_lengths(x: tf.RaggedTensor) -> tf.Tensor:
    return tf.cast(x.row_lengths(), tf.int32)


def keep_first(x: tf.RaggedTensor, lengths) -> tf.RaggedTensor:
    """Keeps the first `lengths` ids of each row (a scalar or one per row).

    Example:
    >>> x = tf.ragged.constant([[1, 2, 3], [4]])
    >>> keep_first(x, 2).to_list()
    [[1, 2], [4]]
    """
    positions = tf.ragged.range(_row_lengths(x))
    lengths = tf.cast(lengths, tf.int32)
    if lengths.shape.rank == 1:
        lengths = lengths[:, None]
    return tf.ragged.boolean_mask(x, positions < lengths)


def keep_last(x: tf.RaggedTensor, lengths) -> tf.RaggedTensor:
    """Keeps the last `lengths` ids of each row (the original RACE qa cut).

    Example:
    >>> x = tf.ragged.constant([[1, 2, 3], [4]])
    >>> keep_last(x, 2).to_list()
    [[2, 3], [4]]
    """
    row_lengths = _row_lengths(x)
    lengths = tf.cast(lengths, tf.int32)
    start = row_lengths - lengths  # may be negative: nothing to cut
    positions = tf.ragged.range(row_lengths)
    return tf.ragged.boolean_mask(x, positions >= start[:, None])


def truncated_pair_lengths(len_a: tf.Tensor, len_b: tf.Tensor, max_length: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """Lengths the original's pair truncation leaves, in closed form.

    The original (`_truncate_seq_pair`) pops the end of the longer side (of
    `b` on a tie) while `len(a) + len(b) > max_length`. When the shorter side
    s satisfies 2s <= max_length only the longer one is cut, to
    max_length - s; otherwise both end equal, then alternate pops starting
    with b leave ceil(max_length/2) for a and floor(max_length/2) for b.

    Example:
    >>> a, b = truncated_pair_lengths(tf.constant([10, 3, 5]), tf.constant([2, 9, 5]), 7)
    >>> a.numpy().tolist(), b.numpy().tolist()
    ([5, 3, 4], [2, 4, 3])
    """
    len_a = tf.cast(len_a, tf.int32)
    len_b = tf.cast(len_b, tf.int32)
    too_long = len_a + len_b > max_length
    shorter = tf.minimum(len_a, len_b)
    one_side = 2 * shorter <= max_length
    a_is_longer = len_a > len_b
    half_up = (max_length + 1) // 2
    half_down = max_length // 2
    cut_a = tf.where(one_side, tf.where(a_is_longer, max_length - shorter, len_a), half_up)
    cut_b = tf.where(one_side, tf.where(a_is_longer, len_b, max_length - shorter), half_down)
    return tf.where(too_long, cut_a, len_a), tf.where(too_long, cut_b, len_b)


def truncate_pair_longest_first(a: tf.RaggedTensor, b: tf.RaggedTensor,
                                max_length: int) -> Tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """The original's `_truncate_seq_pair` on ragged batches (ends are cut).

    Example:
    >>> a, b = truncate_pair_longest_first(tf.ragged.constant([[1, 2, 3, 4]]),
    ...                                    tf.ragged.constant([[5, 6]]), 4)
    >>> a.to_list(), b.to_list()
    ([[1, 2]], [[5, 6]])
    """
    len_a, len_b = truncated_pair_lengths(_row_lengths(a), _row_lengths(b), max_length)
    return keep_first(a, len_a), keep_first(b, len_b)


# ------------------------------------------------------------------ packing
def pack_segments(first: tf.RaggedTensor, second: Optional[tf.RaggedTensor] = None, *,
                  seq_length: Optional[int] = None) -> Dict[str, tf.Tensor]:
    """Packs `[CLS] first [SEP] (second [SEP])` into dense int32 tensors.

    The inputs must already fit (truncate first). Segment ids are 0 for
    [CLS], `first` and its [SEP], 1 for `second` and the last [SEP]; padding
    is 0 with input_mask 0.

    Args:
        first: ragged int ids [B, None].
        second: optional ragged int ids [B, None].
        seq_length: pad to this length; None pads to the longest packed row.

    Returns:
        {"input_ids", "input_mask", "segment_ids"}: int32 [B, T].

    Example:
    >>> out = pack_segments(tf.ragged.constant([[7, 8], [9]]), tf.ragged.constant([[5], []]))
    >>> out["input_ids"].numpy().tolist()
    [[2, 7, 8, 3, 5, 3], [2, 9, 3, 3, 0, 0]]
    >>> out["segment_ids"].numpy().tolist()
    [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 0, 0]]
    """
    first = tf.cast(first, tf.int32)
    batch = first.nrows(out_type=tf.int32)
    cls = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], CLS_ID))
    sep = tf.RaggedTensor.from_tensor(tf.fill([batch, 1], SEP_ID))
    parts = [cls, first, sep]
    segments = [tf.zeros_like(cls), tf.zeros_like(first), tf.zeros_like(sep)]
    if second is not None:
        second = tf.cast(second, tf.int32)
        parts += [second, sep]
        segments += [tf.ones_like(second), tf.ones_like(sep)]
    ids = tf.concat(parts, axis=1)
    segment_ids = tf.concat(segments, axis=1)
    shape = None if seq_length is None else [None, seq_length]
    packed = {
        "input_ids": ids.to_tensor(PAD_ID, shape=shape),
        "input_mask": tf.ones_like(ids).to_tensor(0, shape=shape),
        "segment_ids": segment_ids.to_tensor(0, shape=shape),
    }
    return at_least_one_position(packed) if seq_length is None else packed


def at_least_one_position(ids: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """Pads id tensors [..., T] to T >= 1 (padding, mask 0).

    An empty batch packs to T = 0, and the encoder's [CLS] (position 0)
    must exist even then: the answer to no rows is then no rows.

    Example:
    >>> at_least_one_position({"input_ids": tf.zeros([0, 0], tf.int32)})["input_ids"].shape
    TensorShape([0, 1])
    """
    def pad(x):
        x = tf.convert_to_tensor(x)
        rank = x.shape.rank
        missing = tf.maximum(0, 1 - tf.shape(x)[-1])
        return tf.pad(x, [[0, 0]] * (rank - 1) + [[0, missing]])
    return {k: pad(v) for k, v in ids.items()}


def _as_batch(text) -> tf.Tensor:
    text = tf.convert_to_tensor(text, tf.string)
    if text.shape.rank == 0:
        text = text[None]
    if text.shape.rank != 1:
        raise ValueError(f"Text must be a tf.string tensor of shape [batch], got shape {text.shape}.")
    return text


def _python_text_to_tensor(text):
    if isinstance(text, (str, bytes, list, tuple, np.ndarray)):
        return tf.convert_to_tensor(text, tf.string)
    return text


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTextPreprocessor(keras.layers.Layer):
    """Raw strings -> `input_ids`, `input_mask`, `segment_ids`, as the original.

    Text goes through the original's normalisation
    (`pipelines.tokenizer.preprocess_text`: whitespace, accents stripped by
    NFKD and dropping combining marks, lower-casing when `do_lower_case`;
    normalization="xlnet" also turns `` and '' into "), SentencePiece (in
    the graph, with the original's "digit," re-split), then packing
    `[CLS] A [SEP] (B [SEP])`. Truncation is the original's: a single text is
    cut to max_seq_length - 2 ids; a pair pops the end of the longer side (b
    on a tie) until it fits in max_seq_length - 3. Before normalising, each
    text is cut to max_seq_length * CHARS_PER_PIECE characters (`cut_text`),
    so a huge request costs what a long one does.

    The output length T is the longest packed row of the batch (no compute
    wasted on padding), or `max_seq_length` with `pad_to_max_length=True`.
    The layer has no weights; it works eagerly, in `tf.function` and in a
    `tf.data` map.

    Args:
        spm_model_file: path of the SentencePiece .model (ALBERT special
            pieces at ids 0-4).
        spm_model_proto: the serialized model instead of a file.
        max_seq_length: the longest packed sequence (>= 3).
        do_lower_case: lower-case the text first (the original's flag).
        normalization: "original" (google-research/albert's
            preprocess_text, the default) or "xlnet" (XLNet's and Hugging
            Face's, which also turns `` and '' into "); saved in the config.
        pad_to_max_length: always pad to `max_seq_length`.
        **kwargs: passed to `keras.layers.Layer` (e.g. `name`).

    Example:
    >>> pre = AlbertTextPreprocessor("30k-clean.model", max_seq_length=16)  # doctest: +SKIP
    >>> pre(tf.constant(["Hello world."]))["input_ids"]  # doctest: +SKIP
    """

    def __init__(self, spm_model_file: Optional[str] = None, *, spm_model_proto: Optional[bytes] = None,
                 max_seq_length: int = 128, do_lower_case: bool = True, pad_to_max_length: bool = False,
                 normalization: str = sp_tokenizer.DEFAULT_NORMALIZATION, **kwargs):
        kwargs.setdefault("name", "albert_text_preprocessor")
        super().__init__(**kwargs)
        if (spm_model_file is None) == (spm_model_proto is None):
            raise ValueError("AlbertTextPreprocessor needs exactly one of spm_model_file or spm_model_proto "
                             f"(got spm_model_file={spm_model_file!r} and "
                             f"{'a' if spm_model_proto is not None else 'no'} spm_model_proto).")
        if int(max_seq_length) < 3:
            raise ValueError(f"max_seq_length must be at least 3 ([CLS] A [SEP] B [SEP] needs 3 ids), "
                             f"got {max_seq_length!r}.")
        if spm_model_file is not None:
            vocab = sp_tokenizer.SentencePieceVocab.from_file(spm_model_file)
        else:
            if isinstance(spm_model_proto, str):  # the base64 form of get_config
                spm_model_proto = base64.b64decode(spm_model_proto)
            vocab = sp_tokenizer.SentencePieceVocab.from_proto(bytes(spm_model_proto))
        self._vocab = vocab
        self.max_seq_length = int(max_seq_length)
        self.do_lower_case = bool(do_lower_case)
        self.normalization = sp_tokenizer.check_normalization(normalization)
        self.pad_to_max_length = bool(pad_to_max_length)
        self.tokenizer = vocab.make_tokenizer()
        self._detokenizer = tf_text.SentencepieceTokenizer(model=vocab.model_proto)
        # SentencePiece and ragged ops have no XLA kernels: Keras's
        # jit_compile="auto" (XLA on GPU machines) must stay off for a model
        # holding this layer.
        self.supports_jit = False
        self.built = True

    # ---------------------------------------------------------- properties
    @property
    def spm_model_proto(self) -> bytes:
        return self._vocab.model_proto

    @property
    def vocab_size(self) -> int:
        return self._vocab.vocab_size

    cls_id = CLS_ID
    sep_id = SEP_ID
    mask_id = MASK_ID
    pad_id = PAD_ID

    # ---------------------------------------------------------------- calls
    def tokenize(self, text, max_pieces=None) -> tf.RaggedTensor:
        """Raw text [B] -> ragged int32 piece ids [B, None] of the normalised text.

        Args:
            text: tf.string [B] (or a scalar).
            max_pieces: the pieces the caller keeps at most: the text is first
                cut to max_pieces * CHARS_PER_PIECE characters (`cut_text`).
                None: no cut. Bytes that are not valid UTF-8 are dropped after
                the cut (`pipelines.tokenizer.preprocess_text`).
        """
        text = _as_batch(text)
        if max_pieces is not None:
            text = cut_text(text, max_pieces)
        return self.tokenizer.tokenize(sp_tokenizer.preprocess_text(text, self.do_lower_case, self.normalization))

    def detokenize(self, ids) -> tf.Tensor:
        """Ragged or dense ids [B, None] -> tf.string [B] (the normalised text).

        Dense inputs drop padding, [CLS], [SEP] and [MASK] (not <unk>).
        """
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.convert_to_tensor(ids)
            special = (ids == PAD_ID) | (ids == CLS_ID) | (ids == SEP_ID) | (ids == MASK_ID)
            ids = tf.ragged.boolean_mask(ids, ~special)
        return self._detokenizer.detokenize(tf.cast(ids, tf.int32))

    def _seq_length(self) -> Optional[int]:
        return self.max_seq_length if self.pad_to_max_length else None

    def __call__(self, text, text_pair=None, **kwargs):
        # Python strings and lists are accepted as well as tensors.
        text = _python_text_to_tensor(text)
        text_pair = _python_text_to_tensor(text_pair)
        return super().__call__(text, text_pair, **kwargs)

    def call(self, text, text_pair=None) -> Dict[str, tf.Tensor]:
        first = self.tokenize(text, self.max_seq_length)
        if text_pair is None:
            return pack_segments(keep_first(first, self.max_seq_length - 2), seq_length=self._seq_length())
        second = self.tokenize(text_pair, self.max_seq_length)
        first, second = truncate_pair_longest_first(first, second, self.max_seq_length - 3)
        return pack_segments(first, second, seq_length=self._seq_length())

    def pack(self, first: tf.RaggedTensor, second: Optional[tf.RaggedTensor] = None) -> Dict[str, tf.Tensor]:
        """Packs already-truncated ragged ids with this layer's padding rule."""
        return pack_segments(first, second, seq_length=self._seq_length())

    def compute_output_spec(self, text, text_pair=None):
        shape = (text.shape[0], self.max_seq_length if self.pad_to_max_length else None)
        return {key: keras.KerasTensor(shape, dtype="int32")
                for key in ("input_ids", "input_mask", "segment_ids")}

    # ---------------------------------------------------------------- config
    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            spm_model_proto=base64.b64encode(self.spm_model_proto).decode("ascii"),
            max_seq_length=self.max_seq_length,
            do_lower_case=self.do_lower_case,
            normalization=self.normalization,
            pad_to_max_length=self.pad_to_max_length,
        )
        return config

    @classmethod
    def from_config(cls, config: dict) -> "AlbertTextPreprocessor":
        config = dict(config)
        proto = config.pop("spm_model_proto")
        return cls(spm_model_proto=base64.b64decode(proto), **config)
