"""PieceText: the Python ids must be the in-graph tokenizer's ids, including the
original's re-split of pieces ending in "<digit>,"."""

import os

import pytest
import tensorflow as tf

from pipelines import tokenizer
from pipelines.finetune.sp_text import PieceText


@pytest.fixture(scope="module")
def digit_comma_vocab(tmp_path_factory, corpus_file):
    # "1," and "9," as user-defined symbols: pieces the original splits into "1" ",".
    prefix = os.path.join(str(tmp_path_factory.mktemp("sp_digit")), "sp")
    options = {"user_defined_symbols": tokenizer.USER_DEFINED_SYMBOLS + ["1,", "9,"]}
    path = tokenizer.train_sentencepiece([corpus_file], prefix, vocab_size=120, seed=1,
                                         extra_options=options)
    return tokenizer.SentencePieceVocab.from_file(path)


def test_digit_comma_pieces_are_resplit_like_the_graph(digit_comma_vocab):
    vocab = digit_comma_vocab
    assert vocab.needs_resplit()
    text = PieceText(vocab)
    pieces = text.encode_pieces(text.normalize("in 1, 2019, ka 9, lo"))
    assert "1," not in pieces and "9," not in pieces
    assert pieces.count(",") == 3
    lines = ["In 1, 2019, ka 9, lo.", "Café  naïve ``x'' 11, 9,9"]
    graph = vocab.make_tokenizer().tokenize(tokenizer.preprocess_text(tf.constant(lines), True))
    assert [text.encode_ids(line) for line in lines] == graph.to_list()


def test_special_ids_and_case(vocab):
    lower, cased = PieceText(vocab, do_lower_case=True), PieceText(vocab, do_lower_case=False)
    assert (lower.cls_id, lower.sep_id, lower.pad_id) == (2, 3, 0)
    assert lower.normalize("  Café\tKA ") == "cafe ka"
    assert cased.normalize("Café KA") == "Cafe KA"
    assert lower.normalize_char("É") == "e" and lower.normalize_char(" ") == " "
