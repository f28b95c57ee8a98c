"""The in-graph normalisation (`pipelines.tokenizer.preprocess_text`) against the original's Python code
(`preprocess_text_py`) as strings, on every code point (BMP and beyond) in "ka X lo", lower-cased and cased.

The differences are exactly `pipelines.tokenizer.UNICODE_VERSION_DIFFERENCES` for this Python's unicodedata, and each
is a code point that one side's Unicode database does not know (the listed causes: TensorFlow's ICU, tensorflow-text's
ICU and Python's unicodedata are three Unicode versions).
"""

import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from pipelines import tokenizer

CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
_CHUNK = 512
_ICU_UNKNOWN_SCRIPT = 103  # ICU's USCRIPT_UNKNOWN: tf.strings.unicode_script of a code point TensorFlow's ICU lacks


def _graph(texts, lower):
    return [t.decode("utf-8") for t in
            tokenizer.preprocess_text(tf.constant([t.encode("utf-8") for t in texts]), lower).numpy()]


def string_differences(lower: bool):
    """The code points X where the graph's and Python's normalisation of "ka X lo" differ.

    Code points go through in strings of 512 joined by "|" (a text that differs nowhere clears them all at once);
    those of a string that differs are then tried one by one.
    """
    chunks = [CODE_POINTS[i:i + _CHUNK] for i in range(0, len(CODE_POINTS), _CHUNK)]
    texts = ["|".join(map(chr, chunk)) for chunk in chunks]
    suspects = [c for chunk, text, got in zip(chunks, texts, _graph(texts, lower))
                if got != tokenizer.preprocess_text_py(text, lower) for c in chunk]
    texts = [f"ka {chr(c)} lo" for c in suspects]
    found = [c for c, text, got in zip(suspects, texts, _graph(texts, lower))
             if got != tokenizer.preprocess_text_py(text, lower)]
    assert not suspects or found, "a string of code points differs, but none of them alone"
    return frozenset(found)


@pytest.fixture(scope="module")
def differences():
    return {lower: string_differences(lower) for lower in (True, False)}


@pytest.mark.parametrize("lower", [True, False])
def test_each_difference_is_a_code_point_one_unicode_version_lacks(differences, lower):
    found = sorted(differences[lower])
    assert found, "no difference at all: UNICODE_VERSION_DIFFERENCES must say so"
    in_icu = tf.strings.unicode_script(tf.constant(found, tf.int32)).numpy() != _ICU_UNKNOWN_SCRIPT
    in_python = np.array([unicodedata.category(chr(c)) != "Cn" for c in found])
    both = [hex(c) for c, a, b in zip(found, in_icu, in_python) if a and b]
    assert not both, f"differences at code points both Unicode databases know: {both}"


@pytest.mark.parametrize("lower", [True, False])
def test_differences_are_exactly_the_listed_ones(differences, lower):
    listed = tokenizer.unicode_version_differences(lower)
    if listed is None:
        pytest.skip(f"UNICODE_VERSION_DIFFERENCES has no list for unicodedata {unicodedata.unidata_version}: "
                    f"found {[hex(c) for c in sorted(differences[lower])]}")
    assert differences[lower] == listed, ([hex(c) for c in sorted(differences[lower] - listed)],
                                          [hex(c) for c in sorted(listed - differences[lower])])


def test_a_wrong_lower_casing_is_found(monkeypatch):
    """A companion: lower-casing each text at its first NUL only (the bug s4 fixed) is found at NUL only."""
    monkeypatch.setattr(tokenizer, "_lower_keeping_nul", lambda x: tf.strings.lower(x, encoding="utf-8"))
    assert string_differences(True) - (tokenizer.unicode_version_differences(True) or frozenset()) == {0}
