"""Evaluation metrics of the fine-tuning tasks, as the official scripts compute them.

NumPy / pure Python, no TensorFlow: they run on the predictions a model wrote.

- Classification: `accuracy`, `f1_score` (binary or macro), `matthews_corrcoef`
  (CoLA), `pearson` and `spearman` (STS-B; Spearman with average ranks for ties).
- SQuAD v1.1: `squad_v1_scores` (exact match and F1 with the official answer
  normalisation, max over the gold answers, percentages).
- SQuAD v2.0: `squad_v2_scores` (no-answer handling, HasAns/NoAns splits and the
  official best-threshold search over the no-answer scores; the original's
  search-then-rescore evaluation is `albert_tf.tasks.span_qa.v2_scores_at_best_threshold`).
- RACE: `race_accuracy` (accuracy overall and per level, middle/high).
- Tagging: `tagging_scores` (token accuracy and seqeval-style entity-level
  precision/recall/F1 for BIO tags).

Example:

>>> accuracy([1, 0, 1, 1], [1, 0, 0, 1])
0.75
>>> round(squad_v1_scores({"q1": ["The Eiffel Tower"]}, {"q1": "eiffel tower"})["exact_match"], 1)
100.0
"""

from __future__ import annotations

import collections
import math
import re
import string
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np


def _as_1d(values, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}.")
    return array


def _check_same_length(y_true: np.ndarray, y_pred: np.ndarray) -> None:
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} values but y_pred has {len(y_pred)}.")
    if len(y_true) == 0:
        raise ValueError("No values to score (y_true is empty).")


# ---------------------------------------------------------------------------
# Classification and regression.


def accuracy(y_true: Sequence, y_pred: Sequence) -> float:
    """Share of predictions equal to the labels.

    Args:
        y_true: labels (ids or strings).
        y_pred: predictions, the same length.

    Returns:
        A float in [0, 1].

    >>> accuracy(["a", "b"], ["a", "a"])
    0.5
    """
    y_true, y_pred = _as_1d(y_true, "y_true"), _as_1d(y_pred, "y_pred")
    _check_same_length(y_true, y_pred)
    return float(np.mean(y_true == y_pred))


def _binary_f1(y_true: np.ndarray, y_pred: np.ndarray, positive) -> float:
    true_pos = np.sum((y_pred == positive) & (y_true == positive))
    pred_pos = np.sum(y_pred == positive)
    actual_pos = np.sum(y_true == positive)
    if true_pos == 0:
        return 0.0  # sklearn's zero_division=0: no true positives, no F1
    precision = true_pos / pred_pos
    recall = true_pos / actual_pos
    return float(2 * precision * recall / (precision + recall))


def f1_score(y_true: Sequence, y_pred: Sequence, average: str = "binary",
             positive_label=1, labels: Optional[Sequence] = None) -> float:
    """F1 of the positive class (binary) or the unweighted mean over classes (macro).

    Args:
        y_true: labels.
        y_pred: predictions, the same length.
        average: "binary" (F1 of `positive_label`, as the GLUE MRPC/QQP F1) or
            "macro" (mean of the per-class F1 over `labels`).
        positive_label: the positive class for "binary".
        labels: the classes for "macro"; default every value seen in y_true or y_pred.

    Returns:
        A float in [0, 1]; a class without true positives counts 0.

    >>> f1_score([1, 1, 0, 0], [1, 0, 1, 0])
    0.5
    >>> round(f1_score([0, 1, 2, 2], [0, 2, 2, 2], average="macro"), 4)
    0.6
    """
    y_true, y_pred = _as_1d(y_true, "y_true"), _as_1d(y_pred, "y_pred")
    _check_same_length(y_true, y_pred)
    if average == "binary":
        return _binary_f1(y_true, y_pred, positive_label)
    if average == "macro":
        if labels is None:
            labels = sorted(set(y_true.tolist()) | set(y_pred.tolist()))
        if len(labels) == 0:
            raise ValueError("f1_score(average='macro') needs at least one label.")
        return float(np.mean([_binary_f1(y_true, y_pred, label) for label in labels]))
    raise ValueError(f"f1_score average must be 'binary' or 'macro', got {average!r}.")


def matthews_corrcoef(y_true: Sequence, y_pred: Sequence, positive_label=1) -> float:
    """Matthews correlation of a binary task (CoLA), from TP/TN/FP/FN as the original.

    (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)); 0 when a factor of the
    denominator is 0 (every prediction or every label in one class), as sklearn.

    >>> matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0])
    0.5773502691896258
    """
    y_true, y_pred = _as_1d(y_true, "y_true"), _as_1d(y_pred, "y_pred")
    _check_same_length(y_true, y_pred)
    t, p = y_true == positive_label, y_pred == positive_label
    tp, tn = float(np.sum(t & p)), float(np.sum(~t & ~p))
    fp, fn = float(np.sum(~t & p)), float(np.sum(t & ~p))
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if denominator == 0:
        return 0.0
    return (tp * tn - fp * fn) / math.sqrt(denominator)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; NaN when either side is constant.

    >>> pearson([1, 2, 3], [2, 4, 7])
    0.9933992677987828
    """
    x = _as_1d(x, "x").astype(np.float64)
    y = _as_1d(y, "y").astype(np.float64)
    _check_same_length(x, y)
    dx, dy = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float(np.sum(dx * dx)) * float(np.sum(dy * dy)))
    if denominator == 0:
        return float("nan")
    return float(np.sum(dx * dy)) / denominator


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of their ranks.

    >>> average_ranks([10, 20, 10, 30]).tolist()
    [1.5, 3.0, 1.5, 4.0]
    """
    values = _as_1d(values, "values")
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman correlation: Pearson of the average ranks (ties as scipy).

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 35])
    1.0
    """
    x, y = _as_1d(x, "x"), _as_1d(y, "y")
    _check_same_length(x, y)
    return pearson(average_ranks(x), average_ranks(y))


def mean_squared_error(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    """Mean of the squared differences (reported for STS-B as the original)."""
    y_true = _as_1d(y_true, "y_true").astype(np.float64)
    y_pred = _as_1d(y_pred, "y_pred").astype(np.float64)
    _check_same_length(y_true, y_pred)
    return float(np.mean((y_true - y_pred) ** 2))


def classification_scores(task: str, y_true: Sequence, y_pred: Sequence) -> Dict[str, float]:
    """The metrics the original reports for a GLUE task (plus F1 where GLUE has it).

    Args:
        task: GLUE task name ("cola", "sts-b", "mrpc", ...) or anything else for
            plain accuracy.
        y_true, y_pred: label ids (floats for "sts-b").

    Returns:
        cola: accuracy and matthew_corr; sts-b: pearson, spearman and mse;
        mrpc/qqp: accuracy and f1 (label 1 positive); others: accuracy.

    >>> classification_scores("mrpc", [1, 0, 1], [1, 1, 1])
    {'accuracy': 0.6666666666666666, 'f1': 0.8}
    """
    task = task.lower()
    if task in ("sts-b", "stsb", "regression"):
        return {"pearson": pearson(y_pred, y_true), "spearman": spearman(y_pred, y_true),
                "mse": mean_squared_error(y_true, y_pred)}
    scores = {"accuracy": accuracy(y_true, y_pred)}
    if task == "cola":
        scores["matthew_corr"] = matthews_corrcoef(y_true, y_pred)
    if task in ("mrpc", "qqp"):
        scores["f1"] = f1_score(y_true, y_pred)
    return scores


# ---------------------------------------------------------------------------
# SQuAD (the official evaluation scripts' rules).

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD normalisation: lower-case, remove punctuation, the
    articles a/an/the, and collapse whitespace.

    >>> normalize_answer("The  Eiffel-Tower, an icon!")
    'eiffeltower icon'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def squad_exact(gold: str, prediction: str) -> int:
    """1 when the normalised strings are equal, else 0."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def squad_f1(gold: str, prediction: str) -> float:
    """Bag-of-tokens F1 of the normalised strings (v2 rule: two empty answers score 1).

    >>> round(squad_f1("the cat sat", "a cat sat down"), 4)
    0.8
    """
    gold_tokens = normalize_answer(gold).split()
    pred_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    common = collections.Counter(gold_tokens) & collections.Counter(pred_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_v1_scores(gold_answers: Mapping[str, Sequence[str]],
                    predictions: Mapping[str, str]) -> Dict[str, float]:
    """SQuAD v1.1 exact match and F1 (percentages) as evaluate-v1.1.py.

    A question without a prediction scores 0 (the official script warns and
    counts it). The v1.1 F1 of an empty prediction is 0.

    Args:
        gold_answers: question id -> its gold answer texts (`gold_answers_from_squad`).
        predictions: question id -> predicted answer text.

    Returns:
        {"exact_match", "f1", "total"}.

    >>> round(squad_v1_scores({"a": ["Paris", "in Paris"]}, {"a": "Paris, France"})["f1"], 2)
    66.67
    """
    if not gold_answers:
        raise ValueError("squad_v1_scores: no gold questions to score.")
    exact_total = f1_total = 0.0
    for qid, golds in gold_answers.items():
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        exact_total += max(squad_exact(g, prediction) for g in golds)
        # v1.1 counts an empty prediction (or gold) as F1 0.
        f1_total += max(squad_f1(g, prediction) if normalize_answer(g) and
                        normalize_answer(prediction) else 0.0 for g in golds)
    total = len(gold_answers)
    return {"exact_match": 100.0 * exact_total / total, "f1": 100.0 * f1_total / total,
            "total": total}


def _v2_raw_scores(gold_answers, predictions):
    exact, f1 = {}, {}
    for qid, golds in gold_answers.items():
        golds = [g for g in golds if normalize_answer(g)] or [""]
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        exact[qid] = max(squad_exact(g, prediction) for g in golds)
        f1[qid] = max(squad_f1(g, prediction) for g in golds)
    return exact, f1


def _find_best_threshold(predictions, scores, na_probs, has_answer) -> Tuple[float, float]:
    """The official v2 search, corrected so that the threshold it returns scores the best it reports.

    Walks the questions by rising no-answer score, answering one more at each
    step, from "no answer everywhere" (every unanswerable question right). A
    question counts as answered at threshold t when its score is <= t (the
    official ``na_prob > thresh`` means no answer), so two corrections of
    evaluate-v2.0.py (and of the original ALBERT) make the threshold reproduce
    the score:

    - questions of equal score are answered together: the best is taken only
      after the last of a tie (the official search can report a best that
      answers one question of a tie and not the other, which no threshold does);
    - when "no answer everywhere" is best, the threshold lies below every
      score (the lowest minus 1), not at the search's starting 0.0, which
      answers every question scoring <= 0 and can score far less (issue 29).

    Only questions with a score (a prediction) count, as in the official division.

    Args:
        predictions: question id -> predicted text.
        scores: question id -> exact or F1 of the prediction (0..1).
        na_probs: question id -> no-answer score.
        has_answer: question id -> whether the gold has an answer.

    Returns:
        (best score in percent, its threshold).
    """
    qids = sorted((q for q in scores if q in na_probs), key=lambda q: na_probs[q])
    current = best = float(sum(1 for q in scores if not has_answer[q]))
    best_threshold = 0.0
    if qids:
        lowest = float(na_probs[qids[0]])
        below = lowest - 1.0
        best_threshold = below if below < lowest else math.nextafter(lowest, -math.inf)
    for i, qid in enumerate(qids):
        if has_answer[qid]:
            current += scores[qid]
        else:
            current += -1 if predictions[qid] else 0
        if i + 1 < len(qids) and na_probs[qids[i + 1]] == na_probs[qid]:
            continue  # the next question scores the same: a threshold answers both or neither
        if current > best:
            best = current
            best_threshold = float(na_probs[qid])
    return 100.0 * best / len(scores), best_threshold


def squad_v2_scores(gold_answers: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                    na_probs: Optional[Mapping[str, float]] = None,
                    na_prob_thresh: float = 1.0) -> Dict[str, float]:
    """SQuAD v2.0 metrics as evaluate-v2.0.py.

    A question whose gold answers are all empty (after normalisation) is
    unanswerable; only "" is right for it. With `na_probs` (question id ->
    no-answer score, e.g. the null score difference), a question whose score
    exceeds `na_prob_thresh` counts as predicted unanswerable, and the best
    thresholds for exact match and F1 are searched as the official script,
    corrected so that answering where the score is <= best_f1_thresh scores
    exactly best_f1 (ties answered together; "no answer everywhere" gets a
    threshold below every score, not 0.0: `_find_best_threshold`).

    Args:
        gold_answers: question id -> gold answer texts ([] when unanswerable).
        predictions: question id -> predicted text ("" for no answer).
        na_probs: optional question id -> no-answer score.
        na_prob_thresh: the official --na-prob-thresh (1.0).

    Returns:
        exact, f1, total; HasAns_exact/HasAns_f1/HasAns_total and NoAns_* when
        such questions exist; with na_probs also best_exact, best_exact_thresh,
        best_f1, best_f1_thresh.

    >>> s = squad_v2_scores({"a": ["x"], "b": []}, {"a": "x", "b": ""})
    >>> s["exact"], s["NoAns_f1"]
    (100.0, 100.0)
    """
    if not gold_answers:
        raise ValueError("squad_v2_scores: no gold questions to score.")
    has_answer = {qid: any(normalize_answer(g) for g in golds)
                  for qid, golds in gold_answers.items()}
    # The official make_qid_to_has_ans uses bool(qa["answers"]); answers that
    # normalise to "" do not occur in SQuAD, and are treated as no answer here.
    exact_raw, f1_raw = _v2_raw_scores(gold_answers, predictions)
    probs = dict(na_probs) if na_probs is not None else {k: 0.0 for k in predictions}

    def thresholded(raw):
        out = {}
        for qid, score in raw.items():
            out[qid] = float(not has_answer[qid]) if probs[qid] > na_prob_thresh else score
        return out

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)

    def summary(qids, prefix=""):
        qids = list(qids)
        return {prefix + "exact": 100.0 * sum(exact.get(q, 0.0) for q in qids) / len(qids),
                prefix + "f1": 100.0 * sum(f1.get(q, 0.0) for q in qids) / len(qids),
                prefix + "total": len(qids)}

    if not exact:
        raise ValueError("squad_v2_scores: no prediction for any gold question.")
    # The official script divides by the number of predicted questions.
    result = {"exact": 100.0 * sum(exact.values()) / len(exact),
              "f1": 100.0 * sum(f1.values()) / len(f1), "total": len(exact)}
    has_ids = [q for q, v in has_answer.items() if v]
    no_ids = [q for q, v in has_answer.items() if not v]
    if has_ids:
        result.update(summary(has_ids, "HasAns_"))
    if no_ids:
        result.update(summary(no_ids, "NoAns_"))
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _find_best_threshold(
            predictions, exact_raw, probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _find_best_threshold(
            predictions, f1_raw, probs, has_answer)
    return result


def gold_answers_from_squad(data: Mapping) -> Dict[str, List[str]]:
    """Question id -> gold answer texts of a SQuAD JSON (the parsed file).

    >>> gold_answers_from_squad({"data": [{"paragraphs": [{"context": "c",
    ...     "qas": [{"id": "q", "question": "?",
    ...              "answers": [{"text": "c", "answer_start": 0}]}]}]}]})
    {'q': ['c']}
    """
    out = {}
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                out[qa["id"]] = [a["text"] for a in qa.get("answers", [])]
    return out


# ---------------------------------------------------------------------------
# RACE and tagging.


def race_accuracy(y_true: Sequence[int], y_pred: Sequence[int],
                  levels: Optional[Sequence[str]] = None) -> Dict[str, float]:
    """RACE accuracy, overall and per level ("middle"/"high") when levels are given.

    >>> race_accuracy([0, 1, 2, 3], [0, 1, 0, 0], ["middle", "middle", "high", "high"])
    {'accuracy': 0.5, 'accuracy_high': 0.0, 'accuracy_middle': 1.0}
    """
    y_true, y_pred = _as_1d(y_true, "y_true"), _as_1d(y_pred, "y_pred")
    result = {"accuracy": accuracy(y_true, y_pred)}
    if levels is not None:
        levels = _as_1d(levels, "levels")
        _check_same_length(y_true, levels)
        for level in sorted(set(levels.tolist())):
            chosen = levels == level
            result[f"accuracy_{level}"] = accuracy(y_true[chosen], y_pred[chosen])
    return result


def _split_tag(tag: str) -> Tuple[str, str]:
    """"B-PER" -> ("B", "PER"); "O" -> ("O", ""); a bare "B" -> ("B", "_")."""
    if tag == "O" or not tag:
        return "O", ""
    prefix, _, entity_type = tag.partition("-")
    return prefix[:1], entity_type or "_"


def _chunk_ends(prev_tag, tag, prev_type, entity_type) -> bool:
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag != "O" and prev_type != entity_type


def _chunk_starts(prev_tag, tag, prev_type, entity_type) -> bool:
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag != "O" and prev_type != entity_type


def get_entities(tags: Sequence[str]) -> List[Tuple[str, int, int]]:
    """Entity chunks (type, first, last) of a BIO/IOBES tag sequence, conlleval rules.

    An I- tag after O or after another type starts a new entity (as seqeval's
    default mode and conlleval).

    >>> get_entities(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"])
    [('PER', 0, 1), ('LOC', 3, 3), ('LOC', 4, 4), ('ORG', 5, 5)]
    """
    chunks = []
    prev_tag, prev_type, begin = "O", "", 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, entity_type = _split_tag(tag)
        if _chunk_ends(prev_tag, prefix, prev_type, entity_type):
            chunks.append((prev_type, begin, i - 1))
        if _chunk_starts(prev_tag, prefix, prev_type, entity_type):
            begin = i
        prev_tag, prev_type = prefix, entity_type
    return chunks


def tagging_scores(true_tags: Sequence[Sequence[str]],
                   pred_tags: Sequence[Sequence[str]]) -> Dict[str, float]:
    """Token accuracy and entity-level precision/recall/F1 (micro, seqeval-style).

    Args:
        true_tags: per sentence, the gold tag of every word.
        pred_tags: per sentence, the predicted tag of every word (same lengths).

    Returns:
        {"token_accuracy", "precision", "recall", "f1"}; a ratio with a zero
        denominator is 0.

    >>> s = tagging_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    >>> round(s["token_accuracy"], 4), s["f1"]
    (0.6667, 0.0)
    """
    if len(true_tags) != len(pred_tags):
        raise ValueError(f"true_tags has {len(true_tags)} sentences, pred_tags {len(pred_tags)}.")
    correct_tokens = total_tokens = 0
    true_entities, pred_entities = set(), set()
    for n, (gold, pred) in enumerate(zip(true_tags, pred_tags)):
        if len(gold) != len(pred):
            raise ValueError(f"Sentence {n}: {len(gold)} gold tags but {len(pred)} predicted.")
        correct_tokens += sum(g == p for g, p in zip(gold, pred))
        total_tokens += len(gold)
        true_entities.update((n,) + e for e in get_entities(gold))
        pred_entities.update((n,) + e for e in get_entities(pred))
    correct = len(true_entities & pred_entities)
    precision = correct / len(pred_entities) if pred_entities else 0.0
    recall = correct / len(true_entities) if true_entities else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"token_accuracy": correct_tokens / total_tokens if total_tokens else 0.0,
            "precision": precision, "recall": recall, "f1": f1}


def format_results(results: Mapping[str, float]) -> str:
    """`key = value` lines, sorted by key, as the original's eval_results.txt.

    >>> print(format_results({"f1": 0.5, "accuracy": 0.75}), end="")
    accuracy = 0.75
    f1 = 0.5
    """
    return "".join(f"{key} = {results[key]}\n" for key in sorted(results))


__all__ = [
    "accuracy", "average_ranks", "classification_scores", "f1_score", "format_results",
    "get_entities", "gold_answers_from_squad", "matthews_corrcoef", "mean_squared_error",
    "normalize_answer", "pearson", "race_accuracy", "spearman", "squad_exact", "squad_f1",
    "squad_v1_scores", "squad_v2_scores", "tagging_scores",
]
