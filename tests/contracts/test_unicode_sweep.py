"""The Unicode sweep: every BMP code point X (surrogates skipped) in "ka X", "ka X lo" and "X", through the
in-graph preprocessor (`AlbertTextPreprocessor.tokenize`) and through the original's Python path
(`tokenization.preprocess_text` + `encode_pieces` + `PieceToId`, written out below from
google-research/albert, with the `sentencepiece` package), lower-cased and cased.

The differences must be exactly PREPROCESSOR_DIFFERENCES (none): the test fails on a new difference and on a
listed one that went away. The sweep's OpenVINO half (the OpenVINO tokenizer against the in-graph one) needs
the [openvino] environment: tests/albert_tf/test_openvino_export.py.
"""

import unicodedata

import pytest
import tensorflow as tf

from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from tests.script_vocab import train_script_spm

TEMPLATES = ("ka {}", "ka {} lo", "{}")
CODE_POINTS = [c for c in range(0x10000) if not 0xD800 <= c < 0xE000]
SPIECE_UNDERLINE = "\u2581"
# (template, do_lower_case) -> the code points where the in-graph ids differ from the original's: none.
PREPROCESSOR_DIFFERENCES = {}


def original_preprocess_text(inputs, lower):
    """google-research/albert tokenization.preprocess_text(inputs, remove_space=True, lower=lower), Python 3."""
    outputs = " ".join(inputs.strip().split())
    outputs = unicodedata.normalize("NFKD", outputs)
    outputs = "".join([c for c in outputs if not unicodedata.combining(c)])
    return outputs.lower() if lower else outputs


def original_encode_pieces(sp_model, text):
    """google-research/albert tokenization.encode_pieces(sp_model, text) on Python 3 (no sampling)."""
    pieces = sp_model.EncodeAsPieces(text)
    new_pieces = []
    for piece in pieces:
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            cur_pieces = sp_model.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
            if piece[0] != SPIECE_UNDERLINE and cur_pieces[0][0] == SPIECE_UNDERLINE:
                if len(cur_pieces[0]) == 1:
                    cur_pieces = cur_pieces[1:]
                else:
                    cur_pieces[0] = cur_pieces[0][1:]
            cur_pieces.append(piece[-1])
            new_pieces.extend(cur_pieces)
        else:
            new_pieces.append(piece)
    return new_pieces


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_script_spm(str(tmp_path_factory.mktemp("sweep_spm")))


@pytest.fixture(scope="module")
def original_ids(spm_model):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spm_model)
    return lambda text, lower: [sp.PieceToId(p) for p in original_encode_pieces(sp, original_preprocess_text(text,
                                                                                                             lower))]


def sweep(tokenize, reference, template):
    """The code points X where tokenize(batch) and reference(text) differ on template.format(X).

    Args:
        tokenize: list of str -> list of id lists (one graph call for the whole batch).
        reference: str -> id list.
        template: a format string with one {}.
    """
    texts = [template.format(chr(c)) for c in CODE_POINTS]
    got = tokenize(texts)
    return tuple(c for c, text, ids in zip(CODE_POINTS, texts, got) if ids != reference(text))


def _graph(pre):
    return lambda texts: pre.tokenize(tf.constant([t.encode("utf-8") for t in texts])).to_list()


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("template", TEMPLATES)
def test_preprocessor_equals_the_original_on_every_bmp_code_point(spm_model, original_ids, template, lower):
    pre = AlbertTextPreprocessor(spm_model, max_seq_length=64, do_lower_case=lower)
    found = sweep(_graph(pre), lambda text: original_ids(text, lower), template)
    print(template, lower, [hex(c) for c in found])
    assert found == PREPROCESSOR_DIFFERENCES.get((template, lower), ()), [hex(c) for c in found[:40]]


def test_the_sweep_finds_a_wrong_normalisation(spm_model, original_ids):
    """A companion: the normalisation before the fix (tf.strings.lower cut each text at its NUL, and U+0085
    was not whitespace for the graph) is caught, at exactly those code points."""
    from pipelines import tokenizer as sp_tokenizer

    pre = AlbertTextPreprocessor(spm_model, max_seq_length=64)

    def old_normalisation(texts):
        x = tf.strings.regex_replace(tf.constant(texts), r"[\s\p{Z}]+", " ")
        x = sp_tokenizer.drop_combining_marks(tf.strings.strip(tf_text_nfkd(x)))
        return pre.tokenizer.tokenize(tf.strings.lower(x, encoding="utf-8")).to_list()

    found = sweep(old_normalisation, lambda text: original_ids(text, True), "ka {} lo")
    assert {0x0, 0x85} <= set(found) and len(found) < 100, [hex(c) for c in found]


def tf_text_nfkd(x):
    import tensorflow_text as tf_text

    return tf_text.normalize_utf8(x, "NFKD")
