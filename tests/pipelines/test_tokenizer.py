"""SentencePiece training settings, vocabulary checks, word starts, and the
in-graph normalisation against the original's Python preprocessing."""

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


@pytest.mark.parametrize("lower", [True, False])
def test_graph_preprocessing_matches_python(lower):
    lines = ["  Hello\t\tWorld  ", "Caf\u00e9 na\u00efve \u00c5ngstr\u00f6m", "``quoted'' text",
             "a\u00a0b\u2003c", "\ufb01ne ligature", "", "   ", "MiXeD CaSe 123"]
    got = tokenizer.preprocess_text(tf.constant(lines), lower).numpy()
    want = [tokenizer.preprocess_text_py(s, lower).encode("utf-8") for s in lines]
    assert list(got) == want


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
