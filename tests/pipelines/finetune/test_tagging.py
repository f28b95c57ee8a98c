"""CoNLL reader, first-piece label alignment and the mapping back to words."""

import os

import numpy as np
import pytest

from pipelines.finetune import tagging
from pipelines.finetune.sp_text import PieceText

TRAIN = """-DOCSTART- -X- -X- O

Kalo NNP B-PER
Mitenser NNP I-PER
visited VBD O
Quavi NNP B-LOC

Don NNP B-ORG
"""


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


@pytest.fixture(scope="module")
def text(vocab):
    return PieceText(vocab, do_lower_case=True)


def test_read_conll_sentences_and_tags(tmp_path):
    path = _write(os.path.join(str(tmp_path), "train.txt"), TRAIN)
    sentences = tagging.read_conll(path)
    assert [s.words for s in sentences] == [("Kalo", "Mitenser", "visited", "Quavi"), ("Don",)]
    assert sentences[0].tags == ("B-PER", "I-PER", "O", "B-LOC")
    assert sentences[0].source == f"{path}:3" and sentences[1].lines == (8,)
    assert tagging.learn_tag_names(sentences) == ["B-LOC", "B-ORG", "B-PER", "I-PER", "O"]
    assert tagging.find_conll_file(str(tmp_path), "train") == path


def test_untagged_test_file(tmp_path):
    path = _write(os.path.join(str(tmp_path), "test.txt"), "Kalo\nvisited\n\nDon\n")
    sentences = tagging.read_conll(path)
    assert [(s.words, s.tags) for s in sentences] == [(("Kalo", "visited"), None), (("Don",), None)]


def test_reader_errors(tmp_path):
    mixed = _write(os.path.join(str(tmp_path), "m.txt"), "Kalo B-PER\nvisited\n")
    with pytest.raises(ValueError, match=f"{mixed}:2: expected 'word TAG' lines"):
        tagging.read_conll(mixed)
    empty = _write(os.path.join(str(tmp_path), "e.txt"), "\n-DOCSTART- O\n\n")
    with pytest.raises(ValueError, match=f"{empty}: no sentences"):
        tagging.read_conll(empty)


def test_first_piece_carries_the_tag(tmp_path, text):
    sentences = tagging.read_conll(_write(os.path.join(str(tmp_path), "t.txt"), TRAIN))
    names = tagging.learn_tag_names(sentences)
    features = tagging.convert_sentences_to_features(sentences, text, names, max_seq_length=32)
    pieces = [text.encode_ids(w) for w in sentences[0].words]
    assert all(len(p) >= 2 for p in pieces)  # every word has continuation pieces here
    expected_ids = [2] + [i for p in pieces for i in p] + [3]
    row = features.input_ids[0]
    assert row[:len(expected_ids)].tolist() == expected_ids and (row[len(expected_ids):] == 0).all()
    assert features.input_mask[0].sum() == len(expected_ids)
    expected_labels = [-1]
    for p, tag in zip(pieces, sentences[0].tags):
        expected_labels += [names.index(tag)] + [-1] * (len(p) - 1)
    expected_labels += [-1] * (32 - len(expected_labels))
    assert features.label_ids[0].tolist() == expected_labels
    starts = np.flatnonzero(features.word_index[0] >= 0)
    assert features.word_index[0][starts].tolist() == [0, 1, 2, 3]
    assert (features.label_ids[0] >= 0).sum() == 4


def test_word_predictions_back_from_pieces(tmp_path, text):
    sentences = tagging.read_conll(_write(os.path.join(str(tmp_path), "t.txt"), TRAIN))
    names = tagging.learn_tag_names(sentences)
    features = tagging.convert_sentences_to_features(sentences, text, names, max_seq_length=32)
    # Predict the gold tag on first pieces and nonsense on every other piece:
    # only first pieces may be read back.
    predicted = np.where(features.label_ids >= 0, features.label_ids, names.index("B-ORG"))
    words = features.word_predictions(predicted, names)
    assert words == [list(s.tags) for s in sentences]
    # Logits cut to the longest row of the batch still map back.
    width = int(features.input_mask.sum(1).max())
    assert features.word_predictions(predicted[:, :width], names) == words


def test_truncation_cuts_words_and_predicts_o(tmp_path, text):
    sentences = tagging.read_conll(_write(os.path.join(str(tmp_path), "t.txt"), TRAIN))
    names = tagging.learn_tag_names(sentences)
    first_two = len(text.encode_ids("Kalo")) + len(text.encode_ids("Mitenser"))
    features = tagging.convert_sentences_to_features(sentences, text, names,
                                                     max_seq_length=first_two + 2)
    assert features.truncated_words == 2  # "visited" and "Quavi"
    assert features.input_ids[0, first_two + 1] == 3  # [SEP] closes the cut sentence
    words = features.word_predictions(np.maximum(features.label_ids, 0), names)
    assert words[0] == ["B-PER", "I-PER", "O", "O"]


def test_unknown_tag_names_file_and_line(tmp_path, text):
    dev = _write(os.path.join(str(tmp_path), "dev.txt"), "Kalo B-PER\nvisited B-MISC\n")
    with pytest.raises(ValueError, match=f"{dev}:2: tag 'B-MISC' is not in the training tag set"):
        tagging.convert_sentences_to_features(tagging.read_conll(dev), text, ["B-PER", "O"], 16)


def test_model_inputs_and_labels(tmp_path, text):
    sentences = tagging.read_conll(_write(os.path.join(str(tmp_path), "t.txt"), TRAIN))
    names = tagging.learn_tag_names(sentences)
    features = tagging.convert_sentences_to_features(sentences, text, names, 16)
    x, y = features.model_inputs(), features.label_ids
    assert sorted(x) == ["input_ids", "input_mask", "segment_ids"]
    assert x["input_ids"].shape[1] == 16 and y.shape == x["input_ids"].shape


URL = "http://kalomiten.ser/qua?vi=don&x=1"


def test_a_long_word_is_dropped_alone_and_a_word_without_pieces_keeps_its_tag(tmp_path, text):
    path = _write(os.path.join(str(tmp_path), "t.txt"),
                  f"ka B-X\n{URL} O\nlo O\nmi B-Y\nten O\n\u200b B-Y\nDon B-X\n")
    sentences = tagging.read_conll(path)
    names = ["B-X", "B-Y", "O"]
    # The premise, in this vocabulary: one piece each but the URL's 19 and U+200B's none (<unk> is id 1).
    assert [len(text.encode_ids(w)) for w in sentences[0].words] == [1, 19, 1, 1, 1, 0, 1]
    # 16 positions: [CLS] + 14 pieces + [SEP]. The URL does not fit; the 6 other words (6 pieces) do.
    features = tagging.convert_sentences_to_features(sentences, text, names, max_seq_length=16)
    assert features.input_ids[0].tolist() == [2, 31, 20, 26, 40, 1, 41, 3] + [0] * 8
    assert features.word_index[0].tolist() == [-1, 0, 2, 3, 4, 5, 6, -1] + [-1] * 8
    assert features.label_ids[0].tolist() == [-1, 0, 2, 1, 2, 1, 0, -1] + [-1] * 8
    assert (features.truncated_words, features.pieceless_words) == (1, 1)
    gold = np.maximum(features.label_ids, 0)
    assert features.word_predictions(gold, names) == [["B-X", "O", "O", "B-Y", "O", "B-Y", "B-X"]]


def test_words_after_a_dropped_one_are_kept_where_they_fit_and_the_drop_is_logged(tmp_path, text, caplog):
    path = _write(os.path.join(str(tmp_path), "t.txt"), "Kalo B-X\nvisited O\nQuavi B-Y\nDon O\n\nka O\n")
    sentences = tagging.read_conll(path)
    # 6 positions, 4 pieces: Kalo (2) fits; visited (6) does not; Quavi (2) fills the row; Don (1) is left out.
    with caplog.at_level("INFO"):
        features = tagging.convert_sentences_to_features(sentences, text, ["B-X", "B-Y", "O"], max_seq_length=6)
    assert features.input_ids[0].tolist() == [2, 31, 35, 30, 32, 3]
    assert features.word_index[0].tolist() == [-1, 0, -1, 2, -1, -1]
    assert features.input_ids[1].tolist() == [2, 31, 3, 0, 0, 0]
    assert features.truncated_words == 2
    lines = [r.getMessage() for r in caplog.records if "did not fit" in r.getMessage()]
    assert lines == [f"Tagging: 2 word(s) in 1 sentence(s) did not fit in max_seq_length=6 and were dropped "
                     f"(predicted 'O'; the later words that fit are kept), the first 'visited' (6 pieces) at "
                     f"{path}:2; 0 word(s) with no piece stand as <unk>."]
    assert caplog.records[-1].levelname == "WARNING"
