"""Issue 35 N8 and N9: the exports serve what fine-tuning trained.

- N8: a classifier records whether it was trained on text pairs (task_config.json "text_pairs"); its
  SavedModel's serving_default then takes the pair, and its OpenVINO text model (one text) is refused in one
  line naming --notext_signatures (tests/albert_tf/test_openvino_export.py runs the binary in the [openvino]
  environment; the refusal here comes before OpenVINO is imported).
- N9: tagging serves a tag only at each word's first piece, where the tagging reader puts the word's label
  (hand-worked below on the tiny SentencePiece model's pieces).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

TAGS = ["O", "B-X", "I-X"]


@pytest.fixture(scope="module")
def pre(tmp_path_factory):
    spm = train_tiny_spm(str(tmp_path_factory.mktemp("serving_spm")))
    return albert_tf.AlbertTextPreprocessor(spm, max_seq_length=16)


def _signatures(model, folder):
    from albert_tf.export import export_saved_model

    return tf.saved_model.load(export_saved_model(model, folder, freeze_weights=False)).signatures


@pytest.mark.parametrize("text_pairs", [True, False, None])
def test_text_pairs_are_recorded_and_decide_the_default_signature(tmp_path, pre, text_pairs):
    """True: serving_default (and serve_text_pair) take text + text_pair; False or not known: one text by
    default, pairs in serve_text_pair. The saved folder keeps the setting."""
    clf = albert_tf.AlbertClassifier(tiny_config(), 3, preprocessor=pre, text_pairs=text_pairs)
    folder = albert_tf.save_task_model(clf, str(tmp_path / "model"))
    again = albert_tf.load_task_model(folder)
    assert again.text_pairs is text_pairs and again.task_config["text_pairs"] is text_pairs
    signatures = _signatures(again, str(tmp_path / "export"))
    inputs = {name: sorted(fn.structured_input_signature[1]) for name, fn in signatures.items()}
    single = ["text", "text_pair"] if text_pairs else ["text"]
    assert inputs == {"serving_default": single, "serve_text_pair": ["text", "text_pair"],
                      "serve_token_ids": ["input_ids", "input_mask", "segment_ids"]}
    if text_pairs:
        texts, pairs = ["ka lo mi", "ten ser"], ["vi don", "ka ka lo"]
        got = signatures["serving_default"](text=tf.constant(texts), text_pair=tf.constant(pairs))["logits"]
        np.testing.assert_allclose(got.numpy(), again((tf.constant(texts), tf.constant(pairs))).numpy(), atol=1e-6)


def test_text_pairs_must_be_a_bool_or_none(pre):
    with pytest.raises(ValueError, match="text_pairs must be True, False or None .*got 'yes'"):
        albert_tf.AlbertClassifier(tiny_config(), 2, preprocessor=pre, text_pairs="yes")


def test_openvino_text_model_of_a_pair_classifier_is_refused_in_one_line(tmp_path, pre):
    from albert_tf.export.openvino import export_openvino

    clf = albert_tf.AlbertClassifier(tiny_config(), 3, preprocessor=pre, text_pairs=True)
    with pytest.raises(ValueError) as error:
        export_openvino(clf, str(tmp_path / "ov"))
    message = str(error.value)
    assert "\n" not in message and "trained on text pairs" in message and "--notext_signatures" in message
    assert not os.path.exists(tmp_path / "ov")


def test_the_classifier_task_records_pairs(tmp_path):
    """albert-finetune's classification task builds the model with text_pairs from its data."""
    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.classification import ClassificationData, CsvTask

    spm = train_tiny_spm(str(tmp_path))
    task = CsvTask("csv", TaskOptions(spm_model_file=spm, max_seq_length=16))
    for pairs in (None, ["b", "d"]):
        data = ClassificationData(["a", "c"], pairs, np.array([0, 1]), ["x", "y"], ["1", "2"])
        model = task.build_model(tiny_config(), None, data)
        assert model.text_pairs is (pairs is not None)


def test_tagging_serves_one_tag_per_word_at_its_first_piece(tmp_path, pre):
    """Hand-worked: "ka lokafe" is [CLS] ▁ka ▁lo ka f e [SEP] in the tiny vocabulary; its words "ka" and "lokafe"
    start at ▁ka and ▁lo, the only pieces the tagging reader labels. A head whose every logit row is (0, 1, 0)
    tags every piece B-X, so the export must answer B-X at those two and "" / -1 elsewhere."""
    tagger = albert_tf.AlbertTokenClassifier(tiny_config(), len(TAGS), preprocessor=pre, tag_names=TAGS)
    tagger.head.output_weights.assign(np.zeros(tagger.head.output_weights.shape, np.float32))
    tagger.head.output_bias.assign(np.array([0.0, 1.0, 0.0], np.float32))
    signatures = _signatures(tagger, str(tmp_path / "export"))
    assert sorted(signatures) == ["serve_token_ids", "serving_default"]  # no pair signature
    out = signatures["serving_default"](text=tf.constant(["ka lokafe", ""]))
    pieces = [[p.decode() for p in row] for row in out["pieces"].numpy()]
    assert pieces == [["[CLS]", "\u2581ka", "\u2581lo", "ka", "f", "e", "[SEP]"],
                      ["[CLS]", "[SEP]", "", "", "", "", ""]]
    assert [[t.decode() for t in row] for row in out["tags"].numpy()] == [
        ["", "B-X", "B-X", "", "", "", ""], [""] * 7]
    assert out["tag_ids"].numpy().tolist() == [[-1, 1, 1, -1, -1, -1, -1], [-1] * 7]
    # The tagging reader labels the same two pieces of the same words.
    from pipelines.finetune import tagging
    from pipelines.finetune.sp_text import PieceText
    from pipelines.tokenizer import SentencePieceVocab

    sentence = tagging.TaggedSentence(("ka", "lokafe"), ("B-X", "I-X"), "hand:1")
    text = PieceText(SentencePieceVocab.from_proto(pre.spm_model_proto))
    features = tagging.convert_sentences_to_features([sentence], text, TAGS, 16)
    assert features.label_ids[0, :8].tolist() == [-1, 1, 2, -1, -1, -1, -1, -1]
    # Ids in (serve_token_ids): the same two pieces.
    ids = tf.constant([[2, 29, 22, 27, 3]])
    got = signatures["serve_token_ids"](input_ids=ids, input_mask=tf.ones_like(ids), segment_ids=tf.zeros_like(ids))
    assert got["tag_ids"].numpy().tolist() == [[-1, 1, 1, -1, -1]]


def test_the_squad_task_records_n_best_size(tmp_path):
    """Issue 35 N11: albert-finetune's --n_best_size is kept in task_config.json, so the export decodes as
    predictions.json did."""
    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.span_qa import SquadTask

    spm = train_tiny_spm(str(tmp_path))
    task = SquadTask("squad_v1", TaskOptions(spm_model_file=spm, max_seq_length=16, n_best_size=3))
    model = task.build_model(tiny_config(), None, None)
    folder = albert_tf.save_task_model(model, str(tmp_path / "qa"))
    assert albert_tf.load_task_model(folder).n_best_size == 3 and model.task_config["n_best_size"] == 3
