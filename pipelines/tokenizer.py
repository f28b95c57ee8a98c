"""SentencePiece: vocabulary training with the original's settings, the
vocabulary checks, and the in-graph text normalisation + tokenizer.

The per-example path is graph ops only (tensorflow_text.SentencepieceTokenizer
and string ops); the Python `sentencepiece` package is used once, at setup, to
read the vocabulary and build two small lookup tables (word starts and the
original's "digit followed by comma" re-split), and to train vocabularies.

Example:

>>> vocab = SentencePieceVocab.from_file("30k-clean.model")   # doctest: +SKIP
>>> tokenizer = vocab.make_tokenizer()                         # doctest: +SKIP
>>> ids = tokenizer.tokenize(preprocess_text(tf.constant(["Hello world."]),
...                                          do_lower_case=True))  # doctest: +SKIP
"""

import dataclasses
import functools
import os
import string
import unicodedata
from typing import Iterable, Iterator, List, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from pipelines import fileio

SPIECE_UNDERLINE = "\u2581"
SPECIAL_PIECES = ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")
# The original README's spm_train command, user_defined_symbols passed as a
# list (sentencepiece 0.2 mis-parses the comma-separated string form as CSV).
USER_DEFINED_SYMBOLS = ["(", ")", '"', "-", ".", "\u2013", "\u00a3", "\u20ac"]

# Python's str.split() whitespace (the characters of str.isspace()), for the
# original's " ".join(s.split()). Written out, not as \s or \p{Z}: regex
# engines disagree on those (OpenVINO's reads U+180E as \s, Python does not).
_WHITESPACE_RE = (r"[\x{9}-\x{d}\x{1c}-\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}-\x{2029}"
                  r"\x{202f}\x{205f}\x{3000}]+")

# "original": google-research/albert's tokenization.preprocess_text (whitespace,
# NFKD, combining marks dropped, lower-casing). "xlnet": XLNet's (and Hugging
# Face's AlbertTokenizer's) variant, which also turns `` and '' into ".
NORMALIZATIONS = ("original", "xlnet")
DEFAULT_NORMALIZATION = "original"

# Where the in-graph `preprocess_text` and the original's Python code (`preprocess_text_py`: unicodedata and
# str.lower) give different strings for a code point X (in "ka X lo"): the two sides use different Unicode versions.
# Keyed by Python's `unicodedata.unidata_version`, then by cause; code point ranges, first and last included.
# tests/contracts/test_unicode_versions.py computes the differences over every code point and compares them with
# this list (and the BMP sweep of tests/contracts/test_unicode_sweep.py finds the BMP ones in the piece ids).
UNICODE_VERSION_CAUSES = {
    "lower": "do_lower_case only: tf.strings.lower (TensorFlow's ICU, Unicode 13) has no lower-case mapping for the "
             "capital letters added in Unicode 14 (Glagolitic U+2C2F, Latin U+A7C0, U+A7D0, U+A7D6, U+A7D8, "
             "Vithkuqi U+10570-U+10595); Python's str.lower has (unicodedata 14.0): the graph keeps them upper-case.",
    "nfkd": "both modes: tensorflow-text's NFKD (its own ICU, Unicode 16) decomposes characters added in Unicode 15 "
            "and 16 (Cyrillic superscripts U+1E030-U+1E06D, outlined letters U+1CCD6-U+1CCF9, Todhri, Tulu-Tigalari, "
            "Gurung Khema, Kirat Rai), which Python 3.11's unicodedata (14.0) leaves as they are.",
}
UNICODE_VERSION_DIFFERENCES = {
    "14.0.0": {
        "lower": ((0x2C2F, 0x2C2F), (0xA7C0, 0xA7C0), (0xA7D0, 0xA7D0), (0xA7D6, 0xA7D6), (0xA7D8, 0xA7D8),
                  (0x10570, 0x1057A), (0x1057C, 0x1058A), (0x1058C, 0x10592), (0x10594, 0x10595)),
        "nfkd": ((0x105C9, 0x105C9), (0x105E4, 0x105E4), (0x11383, 0x11383), (0x11385, 0x11385),
                 (0x1138E, 0x1138E), (0x11391, 0x11391), (0x113C5, 0x113C5), (0x113C7, 0x113C8),
                 (0x16121, 0x16128), (0x16D68, 0x16D6A), (0x1CCD6, 0x1CCF9), (0x1E030, 0x1E06D)),
    },
}


def unicode_version_differences(do_lower_case: bool) -> Optional[frozenset]:
    """The code points of UNICODE_VERSION_DIFFERENCES for this Python's unicodedata (None: not listed for it).

    Example:
    >>> unicode_version_differences(True) >= {0x2C2F, 0x1E030} if unicodedata.unidata_version == "14.0.0" else True
    True
    """
    listed = UNICODE_VERSION_DIFFERENCES.get(unicodedata.unidata_version)
    if listed is None:
        return None
    causes = ("lower", "nfkd") if do_lower_case else ("nfkd",)
    return frozenset(c for cause in causes for a, b in listed[cause] for c in range(a, b + 1))


def check_normalization(normalization: str) -> str:
    """Returns `normalization` if it is one of NORMALIZATIONS, else raises ValueError naming it."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}.")
    return normalization


def _code_point_ranges(keep) -> List[List[int]]:
    ranges: List[List[int]] = []
    for code in range(0x110000):
        if 0xD800 <= code < 0xE000 or not keep(chr(code)):  # surrogates are not characters
            continue
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return ranges


@functools.lru_cache(maxsize=None)
def combining_marks_regex() -> str:
    """An RE2 class matching exactly the characters with `unicodedata.combining(c) != 0`.

    The original drops combining marks with `unicodedata.combining`, the
    canonical combining class, not the general category: \\p{Mn} would also
    drop marks of class 0 (Devanagari U+0902 and U+0941, Thai U+0E31, ...)
    and keep non-Mn marks of a non-zero class (e.g. U+1D165). The class is
    built from this Python's unicodedata over every code point (once per
    process, about 0.4 s), so the graph and the Python path drop the same
    characters.

    Example:
    >>> combining_marks_regex().startswith(r"[\\x{300}-\\x{34e}")
    True
    """
    ranges = _code_point_ranges(unicodedata.combining)
    return "[" + "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges) + "]+"


def drop_combining_marks(text: tf.Tensor) -> tf.Tensor:
    """Removes every character whose canonical combining class is not 0 (graph ops).

    Example:
    >>> drop_combining_marks(tf.constant(["e\u0301\u0e01\u0e31"])).numpy()[0].decode("utf-8") == "e\u0e01\u0e31"
    True
    """
    return tf.strings.regex_replace(text, combining_marks_regex(), "")


def drop_invalid_utf8(text: tf.Tensor) -> tf.Tensor:
    """Removes the bytes that are not valid UTF-8, as the original's
    `convert_to_unicode` (`bytes.decode("utf-8", "ignore")`) does.

    Without this, the string ops below read each stray byte as U+FFFD, which
    SentencePiece's normaliser turns into a word break ("ka\\x85lo" would be
    "ka lo"; the original reads "kalo").

    Example:
    >>> drop_invalid_utf8(tf.constant([b"ka\\x85lo\\xc3", b"\\xc3\\xa9\\x00"])).numpy().tolist()
    [b'kalo', b'\\xc3\\xa9\\x00']
    """
    return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore")


def _lower_keeping_nul(text: tf.Tensor) -> tf.Tensor:
    """`tf.strings.lower(encoding="utf-8")`, which ends each string at its first NUL, applied between NULs."""
    parts = tf.strings.split(tf.reshape(text, [-1]), "\x00")
    lowered = tf.ragged.map_flat_values(tf.strings.lower, parts, encoding="utf-8")
    joined = tf.strings.reduce_join(lowered + "\x00", axis=-1)  # one NUL too many at the end
    length = tf.strings.length(joined)
    return tf.reshape(tf.strings.substr(joined, tf.zeros_like(length), length - 1), tf.shape(text))


def preprocess_text(lines: tf.Tensor, do_lower_case: bool, normalization: str = DEFAULT_NORMALIZATION) -> tf.Tensor:
    """The original `tokenization.preprocess_text` as string ops.

    Drops bytes that are not valid UTF-8 (the original's `convert_to_unicode`,
    see `drop_invalid_utf8`), collapses whitespace and strips
    (`" ".join(s.strip().split())`), applies NFKD, drops combining marks
    (`unicodedata.combining(c) != 0`, see `combining_marks_regex`) and
    lower-cases when `do_lower_case` (NUL characters kept, as Python's). With
    normalization="xlnet", `` and '' also become " after the whitespace step
    (XLNet's and Hugging Face's variant; the original ALBERT does not).

    Args:
        lines: a string tensor (invalid UTF-8 bytes are dropped).
        do_lower_case: lowercase as the original's `do_lower_case`.
        normalization: "original" (default) or "xlnet".

    Returns:
        A string tensor of the same shape.

    Example:
    >>> preprocess_text(tf.constant(["  ``Caf\u00e9''  OK "]), True).numpy().tolist()
    [b"``cafe'' ok"]
    >>> preprocess_text(tf.constant(["``Caf\u00e9''"]), True, "xlnet").numpy().tolist()
    [b'"cafe"']
    """
    check_normalization(normalization)
    x = tf.strings.regex_replace(drop_invalid_utf8(lines), _WHITESPACE_RE, " ")
    x = tf.strings.strip(x)
    if normalization == "xlnet":
        x = tf.strings.regex_replace(x, "``|''", '"')
    x = tf_text.normalize_utf8(x, "NFKD")
    x = drop_combining_marks(x)
    if do_lower_case:
        x = _lower_keeping_nul(x)
    return x


def preprocess_text_py(line: str, do_lower_case: bool, normalization: str = DEFAULT_NORMALIZATION) -> str:
    """The same normalisation in Python (vocabulary training, the SQuAD reader).

    Example:
    >>> preprocess_text_py("  ``Caf\u00e9''  OK ", True)
    "``cafe'' ok"
    """
    check_normalization(normalization)
    out = " ".join(line.strip().split())
    if normalization == "xlnet":
        out = out.replace("``", '"').replace("''", '"')
    out = unicodedata.normalize("NFKD", out)
    out = "".join(c for c in out if not unicodedata.combining(c))
    return out.lower() if do_lower_case else out


_START_PUNCT = set('!"#$%&"()*+,-./:;?@[\\]^_`{|}~')
_ENGLISH = set(string.ascii_lowercase)


def is_start_piece(piece: str) -> bool:
    """The original `_is_start_piece_sp`: does this piece begin a word?

    True if it starts with U+2581 or "<", is one of the punctuation characters
    (the original's literal, which lacks the apostrophe; its added bytes for
    the pound and euro signs never match a str), or contains any character
    outside a-z and that punctuation (digits, other scripts).
    """
    if piece.startswith(SPIECE_UNDERLINE) or piece.startswith("<") or piece in _START_PUNCT:
        return True
    allowed = _ENGLISH | _START_PUNCT
    return not all(c.lower() in allowed for c in piece)


@dataclasses.dataclass
class SentencePieceVocab:
    """A checked ALBERT SentencePiece vocabulary and its in-graph tokenizer.

    Args:
        model_proto: the serialized SentencePiece model.
        pieces: the piece of every id.
        resplit: per id, the ids the original's `encode_pieces` turns that
            piece into (only pieces ending in "<digit>," change).

    Use `SentencePieceVocab.from_file(path)`; it raises ValueError when the
    model lacks the ALBERT special pieces at ids 0-4.
    """

    model_proto: bytes
    pieces: List[str]
    resplit: List[List[int]]
    path: str = ""

    @classmethod
    def from_file(cls, path: str) -> "SentencePieceVocab":
        """Loads and checks a .model file."""
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"SentencePiece model not found: {path!r}")
        with tf.io.gfile.GFile(path, "rb") as f:
            proto = f.read()
        return cls.from_proto(proto, path)

    @classmethod
    def from_proto(cls, proto: bytes, path: str = "<serialized model>") -> "SentencePieceVocab":
        """Checks a serialized model (`path` only names it in errors)."""
        import sentencepiece as spm  # setup only, not in the per-example path

        sp = spm.SentencePieceProcessor()
        try:
            sp.LoadFromSerializedProto(proto)
        except Exception as e:  # sentencepiece raises plain RuntimeError/OSError
            raise ValueError(f"{path!r} is not a SentencePiece model: {e}") from None
        pieces = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
        head = pieces[:len(SPECIAL_PIECES)]
        if tuple(head) != SPECIAL_PIECES:
            raise ValueError(
                f"SentencePiece model {path!r} does not have the ALBERT special pieces: ids 0-4 "
                f"must be {list(SPECIAL_PIECES)}, found {head}. Train it with albert-create-vocab "
                "(pad_id=0, unk_id=1, control_symbols=[CLS],[SEP],[MASK]).")
        resplit = []
        for i, piece in enumerate(pieces):
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                # The original's encode_pieces special case, e.g. "▁1," -> "▁1" ",".
                cur = sp.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
                if piece[0] != SPIECE_UNDERLINE and cur and cur[0][0] == SPIECE_UNDERLINE:
                    cur = cur[1:] if len(cur[0]) == 1 else [cur[0][1:]] + cur[1:]
                cur.append(piece[-1])
                resplit.append([sp.PieceToId(p) for p in cur])
            else:
                resplit.append([i])
        return cls(model_proto=proto, pieces=pieces, resplit=resplit, path=path)

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def is_start_table(self) -> np.ndarray:
        """bool [vocab_size]: `is_start_piece` of every id."""
        return np.array([is_start_piece(p) for p in self.pieces], dtype=bool)

    def needs_resplit(self) -> bool:
        return any(len(r) != 1 or r[0] != i for i, r in enumerate(self.resplit))

    def make_tokenizer(self) -> "InGraphTokenizer":
        """A graph tokenizer: normalised strings -> ragged int32 ids."""
        return InGraphTokenizer(self)


class InGraphTokenizer(tf.Module):
    """tensorflow_text SentencePiece tokenisation plus the original's re-split.

    Args:
        vocab: the checked vocabulary.
    """

    def __init__(self, vocab: SentencePieceVocab):
        super().__init__()
        self._sp = tf_text.SentencepieceTokenizer(model=vocab.model_proto, out_type=tf.int32)
        self._resplit = None
        if vocab.needs_resplit():
            self._resplit = tf.ragged.constant(vocab.resplit, dtype=tf.int32)
        self.is_start = tf.constant(vocab.is_start_table())

    def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
        """Ids of already-normalised text: shape text.shape + [None] (ragged)."""
        if isinstance(text, tf.RaggedTensor):
            text = text.with_row_splits_dtype(tf.int64)
        ids = self._sp.tokenize(text)
        if self._resplit is not None:
            pieces = tf.gather(self._resplit, ids.flat_values)
            ids = ids.with_flat_values(pieces).merge_dims(-2, -1)
        return ids


# ---------------------------------------------------------------------------
# Vocabulary training.


def expand_input_patterns(patterns: Sequence[str]) -> List[str]:
    """Comma-separated globs -> sorted, de-duplicated existing files.

    Raises:
        FileNotFoundError: naming every pattern that matches no file.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    files, missing = [], []
    for pattern_list in patterns:
        for pattern in str(pattern_list).split(","):
            pattern = pattern.strip()
            if not pattern:
                continue
            matched = sorted(tf.io.gfile.glob(pattern))
            matched = [m for m in matched if not tf.io.gfile.isdir(m)]
            if not matched:
                missing.append(pattern)
            files.extend(matched)
    if missing:
        raise FileNotFoundError(f"No input file matches {missing!r}.")
    if not files:
        raise FileNotFoundError(f"No input files given (patterns {list(patterns)!r}).")
    seen, unique = set(), []
    for f in files:
        if f not in seen:
            seen.add(f)
            unique.append(f)
    return unique


def _iter_lines(files: Sequence[str], do_lower_case: bool,
                max_line_bytes: int) -> Iterator[str]:
    for path in files:
        with fileio.open_binary(path) as f:
            for raw in f:
                if len(raw) > max_line_bytes:
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                line = preprocess_text_py(line, do_lower_case)
                if line:
                    yield line


def train_sentencepiece(input_files: Sequence[str], model_prefix: str, vocab_size: int = 30000,
                        do_lower_case: bool = True, input_sentence_size: int = 10_000_000,
                        seed: int = 12345, character_coverage: float = 0.99995,
                        model_type: str = "unigram", num_threads: int = 2,
                        max_line_bytes: int = 65536,
                        extra_options: Optional[dict] = None) -> str:
    """Trains a SentencePiece model with the original ALBERT settings.

    pad=0, unk=1, no bos/eos, control symbols [CLS]=2, [SEP]=3, [MASK]=4, the
    README's user-defined symbols, shuffled input sampling of at most
    `input_sentence_size` sentences (a reservoir sample: the corpus is streamed,
    never loaded whole), character_coverage 0.99995, unigram model.  Lines are
    normalised as the pretraining data will be (`preprocess_text`).

    Args:
        input_files: files or globs (comma-separated allowed); .gz is read too.
        model_prefix: output prefix; writes model_prefix.model and .vocab.
        vocab_size: vocabulary size (the original: 30000).
        do_lower_case: lowercase the text first.
        input_sentence_size: sentences sampled for training.
        seed: seed of SentencePiece's sampling.
        character_coverage, model_type, num_threads: passed to SentencePiece.
        max_line_bytes: longer lines are skipped.
        extra_options: further SentencePieceTrainer options (override).

    Returns:
        The path of the .model file.

    Example:

    >>> train_sentencepiece(["corpus.txt"], "/tmp/sp", vocab_size=500)  # doctest: +SKIP
    '/tmp/sp.model'
    """
    import sentencepiece as spm

    if "://" in model_prefix:  # else os.makedirs would make a local folder named "gs:"
        raise ValueError(f"model_prefix={model_prefix!r}: SentencePiece's trainer writes local files only; "
                         "train into a local folder and copy the .model and .vocab files.")
    files = expand_input_patterns(input_files)
    out_dir = os.path.dirname(os.path.abspath(model_prefix))
    os.makedirs(out_dir, exist_ok=True)
    spm.set_random_generator_seed(int(seed))
    options = dict(
        model_prefix=model_prefix, vocab_size=int(vocab_size), pad_id=0, unk_id=1,
        bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        user_defined_symbols=USER_DEFINED_SYMBOLS, shuffle_input_sentence=True,
        input_sentence_size=int(input_sentence_size), character_coverage=character_coverage,
        model_type=model_type, num_threads=int(num_threads),
        # Our text is already normalised the way the pipeline will see it.
        minloglevel=2)
    options.update(extra_options or {})
    lines = _iter_lines(files, do_lower_case, max_line_bytes)
    first = next(lines, None)
    if first is None:
        raise ValueError(f"No text in {files!r}: every line is empty, too long or not UTF-8.")

    def all_lines() -> Iterable[str]:
        yield first
        yield from lines

    spm.SentencePieceTrainer.train(sentence_iterator=iter(all_lines()), **options)
    return model_prefix + ".model"
