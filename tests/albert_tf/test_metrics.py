"""Metrics against values worked out by hand (the arithmetic is in the comments)."""

import math

import numpy as np
import pytest

from albert_tf import metrics


def test_accuracy():
    assert metrics.accuracy([0, 1, 1, 0, 1], [0, 1, 0, 0, 0]) == pytest.approx(3 / 5)


def test_accuracy_rejects_length_mismatch():
    with pytest.raises(ValueError, match="3 values but y_pred has 2"):
        metrics.accuracy([0, 1, 1], [0, 1])


def test_binary_f1():
    # TP = 2 (0, 1), FP = 1 (3), FN = 1 (2): P = R = 2/3.
    assert metrics.f1_score([1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0]) == pytest.approx(2 / 3)
    # No predicted positives: 0, not a division by zero.
    assert metrics.f1_score([1, 0], [0, 0]) == 0.0


def test_macro_f1():
    # class 0: P 1/2 R 1/2 -> 0.5; class 1: P 2/3 R 1 -> 0.8; class 2: P 1 R 1/2 -> 2/3.
    y_true, y_pred = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0]
    expected = (0.5 + 0.8 + 2 / 3) / 3
    assert metrics.f1_score(y_true, y_pred, average="macro") == pytest.approx(expected)
    with pytest.raises(ValueError, match="'micro'"):
        metrics.f1_score(y_true, y_pred, average="micro")


def test_matthews_corrcoef():
    # TP 3, TN 3, FP 1, FN 1: (9 - 1) / sqrt(4 * 4 * 4 * 4) = 0.5.
    y_true = [1, 1, 1, 0, 0, 0, 0, 1]
    y_pred = [1, 0, 1, 0, 0, 1, 0, 1]
    assert metrics.matthews_corrcoef(y_true, y_pred) == pytest.approx(0.5)
    assert metrics.matthews_corrcoef(y_true, y_true) == pytest.approx(1.0)
    assert metrics.matthews_corrcoef(y_true, [1 - y for y in y_true]) == pytest.approx(-1.0)
    # Every prediction in one class: a zero factor in the denominator -> 0.
    assert metrics.matthews_corrcoef(y_true, [1] * 8) == 0.0


def test_pearson():
    # dx = [-1.5, -.5, .5, 1.5], dy = [-3, -1, 0, 4]: 11 / sqrt(5 * 26).
    assert metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
    assert math.isnan(metrics.pearson([1, 1, 1], [1, 2, 3]))


def test_spearman_average_ranks_for_ties():
    assert metrics.average_ranks([1, 2, 2, 3]).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert metrics.average_ranks([5, 5, 5]).tolist() == [2.0, 2.0, 2.0]
    # ranks x [1, 2.5, 2.5, 4], y [1, 3, 2, 4]: 4.5 / sqrt(4.5 * 5).
    assert metrics.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    # Monotone but not linear: Spearman 1, Pearson below 1.
    x = np.arange(1, 6, dtype=float)
    assert metrics.spearman(x, x ** 3) == pytest.approx(1.0)
    assert metrics.pearson(x, x ** 3) < 0.99


def test_classification_scores_per_task():
    cola = metrics.classification_scores("cola", [1, 1, 1, 0, 0, 0, 0, 1], [1, 0, 1, 0, 0, 1, 0, 1])
    assert cola == pytest.approx({"accuracy": 0.75, "matthew_corr": 0.5})
    stsb = metrics.classification_scores("sts-b", [2, 4, 5, 9], [1, 2, 3, 4])
    assert stsb["pearson"] == pytest.approx(11 / math.sqrt(130))
    assert stsb["mse"] == pytest.approx((1 + 4 + 4 + 25) / 4)
    assert set(metrics.classification_scores("mnli", [0], [0])) == {"accuracy"}


def test_normalize_answer():
    assert metrics.normalize_answer("The Quick, brown fox!") == "quick brown fox"
    assert metrics.normalize_answer("an apple a day") == "apple day"
    assert metrics.normalize_answer("Theater anthem") == "theater anthem"  # whole words only


def test_squad_f1_token_overlap():
    # gold [big, red, dog], pred [big, dog, barked]: 2 common, P = R = 2/3.
    assert metrics.squad_f1("the big red dog", "big dog barked") == pytest.approx(2 / 3)
    assert metrics.squad_f1("x", "y") == 0.0


def test_squad_v1_scores():
    gold = {"q1": ["Denver Broncos", "The Denver Broncos"],
            "q2": ["Saint Bernadette Soubirous"],
            "q3": ["1998"]}
    predictions = {"q1": "denver broncos", "q2": "Bernadette"}  # q3 unanswered: 0
    # q1: EM 1, F1 1; q2: EM 0, F1 P 1 R 1/3 -> 0.5; q3: 0.
    scores = metrics.squad_v1_scores(gold, predictions)
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(50.0)
    assert scores["total"] == 3
    # v1.1: an empty prediction has F1 0.
    assert metrics.squad_v1_scores({"q": ["a b"]}, {"q": ""})["f1"] == 0.0


V2_GOLD = {"q1": ["cat"], "q2": ["big dog"], "q3": [], "q4": []}
V2_PRED = {"q1": "cat", "q2": "dog", "q3": "something", "q4": ""}
V2_NA = {"q1": 0.1, "q2": 0.5, "q3": 0.9, "q4": 0.2}


def test_squad_v2_scores_no_threshold():
    # raw exact 1, 0, 0, 1; raw F1 1, 2/3, 0, 1 (q4: both empty -> 1).
    scores = metrics.squad_v2_scores(V2_GOLD, V2_PRED)
    assert scores["exact"] == pytest.approx(50.0)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3 + 0 + 1) / 4)
    assert scores["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert scores["NoAns_exact"] == pytest.approx(50.0)
    assert scores["HasAns_total"] == 2 and scores["NoAns_total"] == 2
    assert "best_f1" not in scores


def test_squad_v2_best_threshold_search():
    # Start at 2 (the unanswerable questions); walk by no-answer score:
    # q1 (0.1) +1 -> 3 (best, thresh 0.1); q4 (0.2) +0; q2 (0.5) exact +0 / F1 +2/3 -> 3.667
    # (best F1, thresh 0.5); q3 (0.9): a non-empty prediction for no answer -> -1.
    scores = metrics.squad_v2_scores(V2_GOLD, V2_PRED, na_probs=V2_NA)
    assert scores["best_exact"] == pytest.approx(75.0)
    assert scores["best_exact_thresh"] == pytest.approx(0.1)
    assert scores["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
    assert scores["best_f1_thresh"] == pytest.approx(0.5)
    # With the threshold at 0.5, q3 (0.9 > 0.5) counts as "no answer": right.
    at_half = metrics.squad_v2_scores(V2_GOLD, V2_PRED, na_probs=V2_NA, na_prob_thresh=0.5)
    assert at_half["exact"] == pytest.approx(75.0)


def _rescored(gold, predictions, na_probs, threshold):
    """Answers where the no-answer score is <= threshold (the official rule), scored without na_probs."""
    answers = {q: "" if na_probs[q] > threshold else text for q, text in predictions.items()}
    return metrics.squad_v2_scores(gold, answers)


def test_squad_v2_threshold_when_no_answer_everywhere_is_best():
    # Issue 29: both questions unanswerable, both predicted with text, null odds -1 and -2.
    # "No answer everywhere" scores 2/2 = 100; answering q2 (-2) gives 1, both 0: nothing beats
    # the start. The official search keeps its starting threshold 0.0, which answers both (F1 0).
    gold, predictions, odds = {"q1": [], "q2": []}, {"q1": "ka", "q2": "lo"}, {"q1": -1.0, "q2": -2.0}
    scores = metrics.squad_v2_scores(gold, predictions, na_probs=odds)
    assert scores["best_f1"] == scores["best_exact"] == 100.0
    assert _rescored(gold, predictions, odds, 0.0)["f1"] == 0.0  # the old threshold: what it scored
    # Below every score (the lowest minus 1): no answer anywhere, which scores best_f1.
    assert scores["best_f1_thresh"] == scores["best_exact_thresh"] == -3.0
    assert _rescored(gold, predictions, odds, scores["best_f1_thresh"])["f1"] == 100.0


def test_squad_v2_threshold_answers_a_tie_together():
    # q1 answerable, predicted right; q2 unanswerable, predicted "y"; both at 0.5. Start at 1 (q2).
    # The official walk: q1 +1 -> 2 (best 100 at 0.5), q2 -1 -> 1; but at 0.5 both are answered
    # (50). A threshold answers both or neither: neither (1, 50) is best, below 0.5.
    gold, predictions, odds = {"q1": ["x"], "q2": []}, {"q1": "x", "q2": "y"}, {"q1": 0.5, "q2": 0.5}
    scores = metrics.squad_v2_scores(gold, predictions, na_probs=odds)
    assert scores["best_f1"] == 50.0 and scores["best_f1_thresh"] == -0.5
    assert _rescored(gold, predictions, odds, 0.5)["f1"] == 50.0  # what the official 100 at 0.5 scores
    # Without the tie (q2 at 0.6) the walk's best is reachable: 100 at 0.5.
    untied = metrics.squad_v2_scores(gold, predictions, na_probs={"q1": 0.5, "q2": 0.6})
    assert (untied["best_f1"], untied["best_f1_thresh"]) == (100.0, 0.5)


@pytest.mark.parametrize("seed", range(60))
def test_squad_v2_recorded_threshold_rescores_to_the_best_over_every_threshold(seed):
    # Random small cases (ties likely: scores from 4 values). Reference: every threshold that
    # answers a different set (each distinct score, and below them all), rescored by the rule.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    words = ["ka", "lo", "mi", "ka lo", ""]
    gold = {f"q{i}": ([] if rng.random() < 0.4 else [str(rng.choice(words[:4]))]) for i in range(n)}
    predictions = {q: str(rng.choice(words)) for q in gold}
    odds = {q: float(rng.choice([-1.5, -0.5, 0.0, 2.0])) for q in gold}
    scores = metrics.squad_v2_scores(gold, predictions, na_probs=odds)
    candidates = sorted(set(odds.values())) + [min(odds.values()) - 1.0]
    for key in ("f1", "exact"):
        best = max(_rescored(gold, predictions, odds, t)[key] for t in candidates)
        assert scores[f"best_{key}"] == pytest.approx(best, abs=1e-9), (gold, predictions, odds)
        at_threshold = _rescored(gold, predictions, odds, scores[f"best_{key}_thresh"])[key]
        assert at_threshold == pytest.approx(scores[f"best_{key}"], abs=1e-9), (gold, predictions, odds)


def test_gold_answers_from_squad():
    data = {"data": [{"paragraphs": [{"context": "abc", "qas": [
        {"id": "a", "question": "?", "answers": [{"text": "b", "answer_start": 1}]},
        {"id": "b", "question": "?", "answers": [], "is_impossible": True}]}]}]}
    assert metrics.gold_answers_from_squad(data) == {"a": ["b"], "b": []}


def test_race_accuracy_per_level():
    result = metrics.race_accuracy([0, 1, 2, 3, 1], [0, 1, 0, 3, 2],
                                   ["middle", "high", "high", "middle", "high"])
    # middle: 2/2; high: 1/3; all: 3/5.
    assert result == pytest.approx({"accuracy": 0.6, "accuracy_middle": 1.0,
                                    "accuracy_high": 1 / 3})


def test_get_entities_conlleval_rules():
    assert metrics.get_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    # I- after O, or after another type, starts an entity; B- ends the previous one.
    assert metrics.get_entities(["O", "I-LOC", "I-PER", "B-PER", "B-PER"]) == [
        ("LOC", 1, 1), ("PER", 2, 2), ("PER", 3, 3), ("PER", 4, 4)]
    assert metrics.get_entities(["O", "O"]) == []


def test_tagging_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG"]]
    pred = [["B-PER", "I-PER", "O", "I-LOC"], ["O", "B-ORG", "O"]]
    # tokens: 3/4 + 2/3 = 5/7. entities gold {PER 0-1, LOC 3, ORG 1-2}, predicted
    # {PER 0-1, LOC 3 (I- after O), ORG 1}: 2 correct of 3 and 3.
    scores = metrics.tagging_scores(gold, pred)
    assert scores["token_accuracy"] == pytest.approx(5 / 7)
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="Sentence 0: 2 gold tags but 1 predicted"):
        metrics.tagging_scores([["O", "O"]], [["O"]])


def test_format_results():
    assert metrics.format_results({"b": 2, "a": 0.5}) == "a = 0.5\nb = 2\n"
