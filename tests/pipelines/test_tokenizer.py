"""SentencePiece training settings, vocabulary checks, word starts, and the
normalisation (graph and Python) against hand-worked outputs of the original's
preprocess_text."""

import os

import numpy as np
import pytest
import tensorflow as tf

from pipelines import tokenizer


def test_trained_vocab_has_albert_special_ids(vocab):
    assert vocab.pieces[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    # The README's user-defined symbols are single pieces.
    for symbol in ["(", ")", '"', "-", "."]:
        assert symbol in vocab.pieces


def test_vocab_without_special_pieces_is_rejected(data_dir, corpus_file):
    import sentencepiece as spm

    prefix = os.path.join(data_dir, "plain")
    spm.SentencePieceTrainer.train(input=corpus_file, model_prefix=prefix, vocab_size=60,
                                   minloglevel=2)
    with pytest.raises(ValueError, match=r"found \['<unk>', '<s>', '</s>'"):
        tokenizer.SentencePieceVocab.from_file(prefix + ".model")
    with pytest.raises(FileNotFoundError, match="nope.model"):
        tokenizer.SentencePieceVocab.from_file(os.path.join(data_dir, "nope.model"))


def test_is_start_piece_as_the_original():
    # Examples of the reference: digits and punctuation start words.
    pieces = ["\u2581in", "\u258120", "19", ","]
    assert [tokenizer.is_start_piece(p) for p in pieces] == [1, 1, 1, 1]
    assert [tokenizer.is_start_piece(p) for p in ["\u2581al", "bert"]] == [1, 0]
    assert tokenizer.is_start_piece("<unk>")
    # "[CLS]" is only letters and brackets: not a start piece for the function
    # (the masking treats [CLS]/[SEP] separately, as the original).
    assert not tokenizer.is_start_piece("[CLS]")
    # The apostrophe is missing from the original's punctuation literal, so a
    # piece holding one counts as "other script": a start piece.
    assert tokenizer.is_start_piece("'s")
    assert tokenizer.is_start_piece("\u00e9t")  # any non a-z character
    assert not tokenizer.is_start_piece("ING")  # case-insensitive letters


# The original's tokenization.preprocess_text(text, lower=...) worked by hand:
# " ".join(text.strip().split()), NFKD, drop characters with a non-zero
# canonical combining class, then lower-case. (input, lower=True, lower=False.)
ORIGINAL_CASES = [
    ("  Hello\t\tWorld  ", "hello world", "Hello World"),
    ("``quoted'' text", "``quoted'' text", "``quoted'' text"),  # no quote rewriting in ALBERT
    ("Caf\u00e9 na\u00efve \u00c5ngstr\u00f6m", "cafe naive angstrom", "Cafe naive Angstrom"),
    ("a\u00a0b\u2003c\u0085d\u2028e", "a b c d e", "a b c d e"),  # str.split() whitespace
    ("\ufb01ne", "fine", "fine"),  # NFKD: the ligature becomes f + i
    ("", "", ""),
    ("   ", "", ""),
    # Devanagari: U+093F and U+0940 are Mc, U+0902 is Mn, all of combining class 0: all kept.
    ("\u0939\u093f\u0902\u0926\u0940", "\u0939\u093f\u0902\u0926\u0940", "\u0939\u093f\u0902\u0926\u0940"),
    ("\u0915\u0941", "\u0915\u0941", "\u0915\u0941"),  # U+0941: Mn of class 0, kept
    ("\u0e01\u0e31\u0e19", "\u0e01\u0e31\u0e19", "\u0e01\u0e31\u0e19"),  # Thai U+0E31: Mn of class 0, kept
    ("x\U0001d165y", "xy", "xy"),  # U+1D165: Mc of class 216, dropped
    ("a \u00b4b", "a  b", "a  b"),  # U+00B4 is NFKD " " + U+0301, after the whitespace step
    ("\u0130stanbul", "istanbul", "Istanbul"),  # I + U+0307, the dot dropped before lower-casing
    ("\u01c4", "dz", "DZ"),  # D Z + caron
    ("\ud55c", "\u1112\u1161\u11ab", "\u1112\u1161\u11ab"),  # Hangul syllable -> its three jamo
    ("KA\x00LO \x00", "ka\x00lo \x00", "KA\x00LO \x00"),  # NUL is a character (not whitespace), kept
    ("ka\u180elo", "ka\u180elo", "ka\u180elo"),  # U+180E is not whitespace for Python (Unicode 6.3+)
]


@pytest.mark.parametrize("lower", [True, False])
def test_normalisation_is_the_originals_in_graph_and_python(lower):
    texts = [case[0] for case in ORIGINAL_CASES]
    want = [case[1] if lower else case[2] for case in ORIGINAL_CASES]
    graph = [t.decode("utf-8") for t in tokenizer.preprocess_text(tf.constant(texts), lower).numpy()]
    assert graph == want
    assert [tokenizer.preprocess_text_py(t, lower) for t in texts] == want


def test_xlnet_normalisation_is_an_explicit_option():
    texts = ["``quoted'' text", "it''s", "Caf\u00e9 ``x``"]
    want = ['"quoted" text', 'it"s', 'cafe "x"']
    graph = tokenizer.preprocess_text(tf.constant(texts), True, "xlnet").numpy()
    assert [t.decode("utf-8") for t in graph] == want
    assert [tokenizer.preprocess_text_py(t, True, "xlnet") for t in texts] == want
    with pytest.raises(ValueError, match="'hf'"):
        tokenizer.preprocess_text(tf.constant(texts), True, "hf")
    with pytest.raises(ValueError, match="'hf'"):
        tokenizer.preprocess_text_py("x", True, "hf")


def test_bytes_that_are_not_utf8_are_dropped_as_the_originals_convert_to_unicode():
    """The original decodes with errors="ignore": a stray byte is nothing, not U+FFFD (a word break)."""
    rng = np.random.default_rng(0)
    alphabet = [b"\x80", b"\xbf", b"\xc2", b"\xe2", b"\xf0", b"\xed", b"\xa0", b"\x85", b"\x9f", b"\xf4", b"\x90",
                b"\xc0", b"\xff", b"\x00", b"Ka", b" ", b"\xc3\xa9", b"\xe2\x80\x83"]
    raw = [b"ka\x85lo", b"ka \xc3 lo\xe2\x80"] + [b"".join(rng.choice(alphabet, size=rng.integers(1, 9)))
                                                   for _ in range(2000)]
    graph = tokenizer.preprocess_text(tf.constant(raw), True).numpy().tolist()
    assert graph[:2] == [b"kalo", b"ka lo"]  # worked by hand
    want = [tokenizer.preprocess_text_py(r.decode("utf-8", "ignore"), True).encode("utf-8") for r in raw]
    assert graph == want
    # The check can fail: reading stray bytes as U+FFFD (what the string ops did before) differs on many.
    replaced = [tokenizer.preprocess_text_py(r.decode("utf-8", "replace"), True).encode("utf-8") for r in raw]
    assert sum(g != r for g, r in zip(graph, replaced)) > 1000


def test_nul_survives_lower_casing_in_every_shape():
    """tf.strings.lower ends a string at its first NUL; the normalisation lower-cases between NULs."""
    texts = ["KA\x00LO", "\x00", "A \x00 B\x00", "\x00\x00X", ""]
    want = [tokenizer.preprocess_text_py(t, True) for t in texts]
    assert want[0] == "ka\x00lo"
    graph = tokenizer.preprocess_text(tf.constant(texts), True).numpy().tolist()
    assert [g.decode("utf-8") for g in graph] == want
    assert tf.strings.lower(tf.constant(texts), encoding="utf-8").numpy().tolist()[0] == b"ka"  # the op alone fails
    grid = tokenizer.preprocess_text(tf.constant([texts[:2], texts[2:4]]), True).numpy().tolist()
    assert [[g.decode("utf-8") for g in row] for row in grid] == [want[:2], want[2:4]]
    assert tokenizer.preprocess_text(tf.constant(texts[0]), True).numpy().decode("utf-8") == want[0]
    assert tokenizer.preprocess_text(tf.constant([], tf.string), True).shape == (0,)


def _all_code_points():
    return "".join(chr(c) for c in range(1, 0x110000) if not 0xD800 <= c < 0xE000)


def test_combining_marks_dropped_as_unicodedata_on_every_code_point():
    """The graph drops exactly the characters with unicodedata.combining(c) != 0."""
    import unicodedata

    text = _all_code_points()
    got = tokenizer.drop_combining_marks(tf.constant(text)).numpy().decode("utf-8")
    want = "".join(c for c in text if not unicodedata.combining(c))
    assert got == want
    # The code points where the old rule (\p{Mn}, as the graph's regex engine
    # knows it) and the original's differ: all handled, and there are many.
    old = set(text) - set(tf.strings.regex_replace(tf.constant(text), r"\p{Mn}", "").numpy().decode("utf-8"))
    differ = sorted(c for c in set(text) if (c in old) != bool(unicodedata.combining(c)))
    assert len(differ) > 100 and {"\u0902", "\u0941", "\u0e31", "\U0001d165"} <= set(differ)
    kept = tokenizer.drop_combining_marks(tf.constant(differ)).numpy()
    assert [k.decode("utf-8") == c for k, c in zip(kept, differ)] == [not unicodedata.combining(c) for c in differ]


def test_python_whitespace_is_the_graphs_on_every_code_point():
    """str.split()'s whitespace and the graph's whitespace class are the same characters."""
    text = _all_code_points()
    spaces = [c for c in text if c.isspace()]
    others = [c for c in text if not c.isspace()]
    cut = tf.strings.regex_replace(tf.constant(["a" + c + "b" for c in spaces]), tokenizer._WHITESPACE_RE, " ")
    assert set(cut.numpy().tolist()) == {b"a b"}
    same = tf.strings.regex_replace(tf.constant("".join(others)), tokenizer._WHITESPACE_RE, " ")
    assert same.numpy().decode("utf-8") == "".join(others)


def test_tokenizer_matches_sentencepiece_and_resplits_digit_comma(vocab, spm_model):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spm_model)
    text = ["ka lo mi ten 2019, the", "in 1, and 7, of"]
    got = vocab.make_tokenizer().tokenize(tf.constant(text)).to_list()
    for line, ids in zip(text, got):
        want = []
        for piece in sp.EncodeAsPieces(line):
            # The original's encode_pieces special case.
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                cur = sp.EncodeAsPieces(piece[:-1].replace("\u2581", ""))
                if piece[0] != "\u2581" and cur[0][0] == "\u2581":
                    cur = cur[1:] if len(cur[0]) == 1 else [cur[0][1:]] + cur[1:]
                want += [sp.PieceToId(p) for p in cur + [","]]
            else:
                want.append(sp.PieceToId(piece))
        assert ids == want
    table = vocab.is_start_table()
    assert table.dtype == np.bool_ and table.shape == (vocab.vocab_size,)


def test_train_sentencepiece_errors(data_dir):
    with pytest.raises(FileNotFoundError, match="missing"):
        tokenizer.train_sentencepiece([os.path.join(data_dir, "missing*.txt")],
                                      os.path.join(data_dir, "x"), vocab_size=50)
    empty = os.path.join(data_dir, "blank.txt")
    with open(empty, "w") as f:
        f.write("\n\n   \n")
    with pytest.raises(ValueError, match="No text"):
        tokenizer.train_sentencepiece([empty], os.path.join(data_dir, "x"), vocab_size=50)


def test_digit_comma_pieces_are_resplit(data_dir, corpus_file):
    # A vocabulary holding the piece "7," (as large real vocabularies hold
    # "1," etc.): the original re-encodes it as "7" + ",".
    prefix = os.path.join(data_dir, "digits")
    tokenizer.train_sentencepiece(
        [corpus_file], prefix, vocab_size=120,
        extra_options={"user_defined_symbols": tokenizer.USER_DEFINED_SYMBOLS + ["7,"]})
    vocab = tokenizer.SentencePieceVocab.from_file(prefix + ".model")
    assert vocab.needs_resplit()
    test_tokenizer_matches_sentencepiece_and_resplits_digit_comma(vocab, prefix + ".model")
    seven_comma = vocab.pieces.index("7,")
    assert vocab.resplit[seven_comma][-1] == vocab.pieces.index(",") or \
        vocab.pieces[vocab.resplit[seven_comma][-1]] == "<unk>"
    assert len(vocab.resplit[seven_comma]) >= 2
