"""SquadTask's v2 scoring as the original run_squad_v2, its recorded threshold, and the v2 n-best keys."""

import json

import numpy as np
import pytest

from albert_tf.tasks import span_qa
from albert_tf.tasks.base import TaskOptions
from pipelines.finetune import squad

# Three questions, threshold worked by hand (official search, questions by rising odds;
# the score starts at 1, the one unanswerable question):
#   q3 (-1.0, "z" right)            +1 -> 2  (best, threshold -1.0)
#   q1 ( 2.0, "x" right)            +1 -> 3  (best, threshold  2.0)
#   q2 ( 3.0, no answer but "y")    -1 -> 2
# so best_f1 = 3/3 = 100 at threshold 2.0: q1 and q3 answered, q2 "".
# At the old fixed threshold 0, q1 (2.0 > 0) would be blanked: F1 2/3.
GOLD = {"q1": ["x"], "q2": [], "q3": ["z"]}
BEST = {"q1": "x", "q2": "y", "q3": "z"}
ODDS = {"q1": 2.0, "q2": 3.0, "q3": -1.0}


def _result(threshold=0.0):
    return squad.SquadPredictions(squad.answers_at_threshold(BEST, ODDS, threshold), dict(BEST),
                                  dict(ODDS), {})


def _examples():
    return [squad.SquadExample(q, "?", "x y z", None, -1, not GOLD[q], GOLD[q]) for q in GOLD]


def test_v2_evaluation_searches_the_unthresholded_answers_and_rescores():
    task = span_qa.SquadTask("squad_v2", TaskOptions())
    # The post-processing at the default threshold 0, as `evaluate` gets it.
    task._postprocess = lambda model, data, batch_size, threshold=0.0: _result(threshold)
    scores = task.evaluate(None, span_qa.SquadData(_examples(), None), 8)
    assert scores["best_f1_thresh"] == 2.0 and scores["null_score_diff_threshold"] == 2.0
    assert scores["best_f1"] == pytest.approx(100.0)
    assert scores["f1"] == pytest.approx(100.0)  # scored at the threshold found, not at 0
    assert scores["exact"] == pytest.approx(100.0)
    assert scores["HasAns_f1"] == pytest.approx(100.0) and scores["NoAns_f1"] == pytest.approx(100.0)


def test_v2_scores_at_best_threshold_returns_the_answers_at_it():
    scores, answers = span_qa.v2_scores_at_best_threshold(GOLD, _result())
    assert answers == {"q1": "x", "q2": "", "q3": "z"}
    assert scores["f1"] == scores["best_f1"]


def test_v2_threshold_when_no_answer_everywhere_is_best_reproduces_best_f1():
    # Issue 29: gold all unanswerable, null odds -1 and -2. No threshold beats "no answer
    # everywhere" (100); the old search kept its starting 0.0, answering both: f1 0, best_f1 100.
    gold, best, odds = {"a": [], "b": []}, {"a": "x", "b": "y"}, {"a": -1.0, "b": -2.0}
    result = squad.SquadPredictions(dict(best), dict(best), dict(odds), {})
    scores, answers = span_qa.v2_scores_at_best_threshold(gold, result)
    assert answers == {"a": "", "b": ""}
    assert scores["f1"] == scores["best_f1"] == 100.0 and scores["exact"] == 100.0
    assert scores["null_score_diff_threshold"] == scores["best_f1_thresh"] < -2.0  # below every odds
    # Serving at the recorded threshold gives the same answers (the rule export and predict use).
    assert squad.answers_at_threshold(best, odds, scores["null_score_diff_threshold"]) == answers


def test_odds_equal_to_the_threshold_keep_the_answer():
    # The official evaluate-v2.0.py: na_prob > thresh is "no answer"; equal answers.
    assert squad.answers_at_threshold({"a": "x", "b": "y"}, {"a": 0.5, "b": 0.5000001}, 0.5) == {"a": "x", "b": ""}
    # A question without null odds (no window) has no answer at any threshold.
    assert squad.answers_at_threshold({"c": "z"}, {}, 1e9) == {"c": ""}


def test_threshold_round_trip_in_task_config(tmp_path):
    assert span_qa.read_threshold(str(tmp_path)) == 0.0  # no model yet: the default
    (tmp_path / "task_config.json").write_text(json.dumps({"task_type": "span_qa", "version_2": True}))
    task = span_qa.SquadTask("squad_v2", TaskOptions())
    task.record_selection({"f1": 80.0, "null_score_diff_threshold": -1.25}, str(tmp_path))
    config = json.loads((tmp_path / "task_config.json").read_text())
    assert config == {"task_type": "span_qa", "version_2": True, "null_score_diff_threshold": -1.25}
    assert span_qa.read_threshold(str(tmp_path)) == -1.25
    # v1.1 records nothing.
    span_qa.SquadTask("squad_v1", TaskOptions()).record_selection({"null_score_diff_threshold": 9.0}, str(tmp_path))
    assert span_qa.read_threshold(str(tmp_path)) == -1.25


def _one_window():
    """Context "ka lo mi" in one window: [CLS] q [SEP] ka lo mi [SEP] (document from position 3)."""
    example = squad.SquadExample("q1", "q", "ka lo mi", None, -1)
    zeros = np.zeros((1, 8), np.int32)
    features = squad.SquadFeatures(
        input_ids=zeros, input_mask=zeros, segment_ids=zeros, p_mask=zeros,
        start_positions=np.zeros(1, np.int32), end_positions=np.zeros(1, np.int32),
        is_impossible=np.zeros(1, np.int32), example_index=np.zeros(1, np.int32),
        unique_ids=np.zeros(1, np.int64), doc_offset=np.array([3], np.int32),
        tok_start_to_orig=[np.array([0, 3, 6], np.int32)], tok_end_to_orig=[np.array([1, 4, 7], np.int32)],
        token_is_max_context=[np.array([True, True, True])], num_examples=1)
    # Beam: one start (piece "lo"), two ends ("mi": -0.2, "lo": -0.3); null logit 0.7.
    outputs = {"start_top_index": np.array([[4]]), "start_top_log_probs": np.array([[-0.1]]),
               "end_top_index": np.array([[[5, 4]]]), "end_top_log_probs": np.array([[[-0.2, -0.3]]]),
               "cls_logits": np.array([0.7], np.float32)}
    return example, features, outputs


def test_v2_nbest_uses_the_originals_log_prob_keys():
    example, features, outputs = _one_window()
    result = squad.postprocess_predictions([example], features, outputs, version_2=True)
    nbest = result.nbest["q1"]
    assert [sorted(e) for e in nbest] == [["end_log_prob", "probability", "start_log_prob", "text"]] * 2
    assert [(e["text"], e["start_log_prob"], e["end_log_prob"]) for e in nbest] == [
        ("lo mi", -0.1, -0.2), ("lo", -0.1, -0.3)]
    # probabilities: softmax of the summed log-probs -0.3 and -0.4.
    assert nbest[0]["probability"] == pytest.approx(1 / (1 + np.exp(-0.1)))


def test_v2_postprocessing_at_odds_equal_to_the_threshold():
    example, features, outputs = _one_window()
    odds = float(np.float32(0.7))
    at = squad.postprocess_predictions([example], features, outputs, version_2=True,
                                       null_score_diff_threshold=odds)
    assert at.null_odds["q1"] == odds and at.predictions["q1"] == "lo mi"
    below = squad.postprocess_predictions([example], features, outputs, version_2=True,
                                          null_score_diff_threshold=np.nextafter(odds, -1.0))
    assert below.predictions["q1"] == ""
