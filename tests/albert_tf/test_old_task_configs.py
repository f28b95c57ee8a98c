"""Models saved before a task_config.json key existed load with the documented default (docs/finetuning.md):
without `normalization` the original's, without `null_score_diff_threshold` 0.0."""

import json

import tensorflow as tf

import albert_tf
from albert_tf.tasks import span_qa
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

QUOTES = "``ka'' lo"  # normalization="xlnet" turns `` and '' into "; the original keeps them


def _pieces(model, text):
    return model.preprocessor.tokenize(tf.constant([text])).to_list()[0]


def test_a_task_config_without_the_later_keys_loads_with_their_defaults(tmp_path):
    spm = train_tiny_spm(str(tmp_path))
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=16, normalization="xlnet")
    qa = albert_tf.AlbertSpanQA(tiny_config(), preprocessor=pre, version_2=True, null_score_diff_threshold=-1.5)
    folder = albert_tf.save_task_model(qa, str(tmp_path / "qa"))
    recorded = albert_tf.load_task_model(folder)
    assert (recorded.preprocessor.normalization, recorded.null_score_diff_threshold) == ("xlnet", -1.5)
    assert span_qa.read_threshold(folder) == -1.5

    path = tmp_path / "qa" / "task_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    del settings["normalization"], settings["null_score_diff_threshold"]
    path.write_text(json.dumps(settings), encoding="utf-8")
    old = albert_tf.load_task_model(folder)
    assert (old.preprocessor.normalization, old.null_score_diff_threshold) == ("original", 0.0)
    assert span_qa.read_threshold(folder) == 0.0
    # The default is in the tokenizer the model uses, not only in the attribute.
    original = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=16)
    assert _pieces(old, QUOTES) == original.tokenize(tf.constant([QUOTES])).to_list()[0] != _pieces(recorded, QUOTES)
