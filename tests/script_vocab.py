"""A test vocabulary that knows the scripts: a SentencePiece model with a piece for every character that the
ALBERT normalisation leaves of a BMP code point, in both cases.

The Unicode sweeps (tests/contracts/test_unicode_sweep.py, the OpenVINO half in
tests/albert_tf/test_openvino_export.py) and the Greek span answers compare pieces of this vocabulary: with the
120-piece vocabulary of `task_testlib.train_tiny_spm`, 62,921 of the 63,488 BMP code points are `<unk>`, so a
normalisation bug confined to one script (Greek final sigma, Cherokee, Hangul) gave `<unk>` on both sides and passed.

The corpus is made here from the code points themselves (nothing downloaded): every BMP code point whose
normalisation (`preprocess_text_py(chr(c), do_lower_case=True)`) is not empty, four consecutive ones to a word,
each word as it is, upper-cased and lower-cased. It is trained cased (the vocabulary knows both cases, for the
cased and the lower-cased sweeps), with character_coverage=1.0, one thread and a fixed seed, so every process
trains the same model (about 2 s, once per process; `train_script_spm` copies it into each later folder).

Three code points stay out of the corpus: SentencePiece's trainer drops every sentence holding U+2581 (its
whitespace mark, which it reads as a word break anyway) or U+2585 (its internal unknown mark), and NUL cannot be in a
training line. NUL and U+2585 are `<unk>` (`SCRIPT_VOCAB_UNKNOWN`).

Example:
>>> path = train_script_spm(tempfile.mkdtemp())  # doctest: +SKIP
"""

import os
import unicodedata
from typing import Dict, List

# The surviving BMP code points that the vocabulary still maps to <unk>, with why (tested: exactly these).
SCRIPT_VOCAB_UNKNOWN = {0x0: "NUL cannot be in a training line",
                        0x2585: "SentencePiece reserves U+2585 (its internal unknown mark) and skips lines holding it"}
_LEFT_OUT = set(SCRIPT_VOCAB_UNKNOWN) | {0x2581}  # U+2581: SentencePiece skips lines holding its whitespace mark
_WORD = 4
_EXTRA_PIECES = 1000  # multi-character pieces beyond one per character
_TRAINED: Dict[str, bytes] = {}  # file suffix -> content of the model trained in this process


def bmp_code_points() -> List[int]:
    """Every BMP code point but the surrogates."""
    return [c for c in range(0x10000) if not 0xD800 <= c < 0xE000]


def surviving_code_points() -> List[int]:
    """The BMP code points whose lower-cased normalisation (`preprocess_text_py`) is not empty."""
    from pipelines.tokenizer import preprocess_text_py

    return [c for c in bmp_code_points() if preprocess_text_py(chr(c), True)]


def script_corpus_lines() -> List[str]:
    """The training text: words of four surviving code points, each as it is, upper- and lower-cased."""
    kept = [c for c in surviving_code_points() if c not in _LEFT_OUT]
    words = ["".join(chr(c) for c in kept[i:i + _WORD]) for i in range(0, len(kept), _WORD)]
    lines = []
    for i in range(0, len(words), 3):
        forms = []
        for word in words[i:i + 3]:
            forms += [word, word.upper(), word.lower()]
        lines.append(" ".join(forms))
    return lines + ["ka lo mi ten ser qua vi don"] * 20  # the sweeps' templates' own words


def train_script_spm(folder: str, name: str = "script") -> str:
    """Writes `folder`/`name`.model (+ .vocab, script_corpus.txt) and returns the .model's path.

    Args:
        folder: an existing folder.
        name: the model's file name without suffix.
    """
    from pipelines import tokenizer

    prefix = os.path.join(folder, name)
    if _TRAINED:
        for suffix, content in _TRAINED.items():
            with open(prefix + suffix, "wb") as f:
                f.write(content)
        return prefix + ".model"
    lines = script_corpus_lines()
    corpus = os.path.join(folder, "script_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    # SentencePiece needs a piece for every character of its own (NFKC) normalisation of the text.
    chars = set()
    for line in lines:
        chars.update(unicodedata.normalize("NFKC", tokenizer.preprocess_text_py(line, False)))
    tokenizer.train_sentencepiece([corpus], prefix, vocab_size=len(chars) + _EXTRA_PIECES, do_lower_case=False,
                                  seed=1, character_coverage=1.0, num_threads=1,
                                  extra_options={"hard_vocab_limit": False})
    for suffix in (".model", ".vocab"):
        with open(prefix + suffix, "rb") as f:
            _TRAINED[suffix] = f.read()
    return prefix + ".model"
