"""Model outputs of every window -> answer strings of the original contexts:
n-best spans per question (top `n_best_size` starts x ends per window,
`max_answer_length`, the max-context check, one entry per distinct text)
mapped back to a substring of the ORIGINAL context; SQuAD v2 null scores and
the null-score-difference threshold (`answers_at_threshold`, the one place that
rule lives); `write_predictions` writes the official predictions.json (plus
nbest_predictions.json and, for v2, null_odds.json).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from pipelines.fileio import atomic_write
from pipelines.finetune.common import softmax
from pipelines.finetune.squad.examples import SquadExample
from pipelines.finetune.squad.features import SquadFeatures


@dataclasses.dataclass
class SquadPredictions:
    """Answers per question id.

    Attributes:
        predictions: the answer text ("" = no answer, v2 with the threshold).
        best_non_null: the best non-empty answer text (what v2 predicts when
            the threshold is +inf).
        null_odds: v2 null-score difference (larger = more likely no answer).
        nbest: the n-best list: dicts of text, probability and the scores
            (start_log_prob/end_log_prob from the v2 beam, else start_logit/end_logit).
    """

    predictions: Dict[str, str]
    best_non_null: Dict[str, str]
    null_odds: Dict[str, float]
    nbest: Dict[str, List[dict]]


def _top_indexes(scores: np.ndarray, n: int) -> List[int]:
    # A stable sort so that ties keep the lower position first.
    return np.argsort(-np.asarray(scores, np.float64), kind="stable")[:n].tolist()


def _window_candidates(outputs: Mapping[str, np.ndarray], row: int, n_best_size: int):
    """(start, end, start_score, end_score) pairs of one window, before filtering."""
    if "start_top_index" in outputs:  # the v2 beam: ends conditioned on each start
        starts = outputs["start_top_index"][row]
        start_scores = outputs["start_top_log_probs"][row]
        ends = outputs["end_top_index"][row]
        end_scores = outputs["end_top_log_probs"][row]
        for i in range(len(starts)):
            for j in range(ends.shape[-1]):
                yield (int(starts[i]), int(ends[i][j]), float(start_scores[i]),
                       float(end_scores[i][j]))
        return
    start_logits, end_logits = outputs["start_logits"][row], outputs["end_logits"][row]
    for s in _top_indexes(start_logits, n_best_size):
        for e in _top_indexes(end_logits, n_best_size):
            yield s, e, float(start_logits[s]), float(end_logits[e])


def answers_at_threshold(best_non_null: Mapping[str, str], null_odds: Mapping[str, float],
                         threshold: float) -> Dict[str, str]:
    """SQuAD v2 answers at a null-score threshold: "" where the null odds exceed it.

    At odds equal to the threshold the answer stays, as in the official
    evaluate-v2.0.py (``na_probs[qid] > na_prob_thresh`` means no answer, and
    its best-threshold search counts a question at the threshold as answered),
    so answering at the searched ``best_f1_thresh`` scores its ``best_f1``.
    (The original run_squad_v2 answers only below the threshold, which can
    score less than the best_f1 its own search reported.) A question without
    null odds (no window) gets "".

    Example:
    >>> answers_at_threshold({"a": "x", "b": "y", "c": "z"}, {"a": -1.0, "b": 0.5, "c": 2.0}, 0.5)
    {'a': 'x', 'b': 'y', 'c': ''}
    """
    return {qid: "" if null_odds.get(qid, math.inf) > threshold else text
            for qid, text in best_non_null.items()}


def postprocess_predictions(examples: Sequence[SquadExample], features: SquadFeatures,
                            outputs: Mapping[str, np.ndarray], *, n_best_size: int = 20,
                            max_answer_length: int = 30, version_2: bool = False,
                            null_score_diff_threshold: float = 0.0) -> SquadPredictions:
    """Model outputs of every window -> answer strings of the original contexts.

    Args:
        examples: the examples the features were built from.
        features: their features (row i of every output is window i).
        outputs: the model's outputs: `start_logits` and `end_logits` [N, T];
            for v2 optionally `cls_logits` [N] (the answerability logit, larger
            = no answer) and the beam outputs `start_top_index`,
            `start_top_log_probs` [N, k], `end_top_index`, `end_top_log_probs`
            [N, k, e], which are used instead of start x end when present.
        n_best_size: candidates per window and entries in the n-best list.
        max_answer_length: longest answer, in pieces.
        version_2: allow "no answer".
        null_score_diff_threshold: v2 predicts "" when the null odds exceed it
            (`answers_at_threshold`; the fine-tuned model's task_config.json
            records the one chosen on dev).

    Returns:
        SquadPredictions. The null odds are the smallest `cls_logits` over the
        windows when given (the original v2), else the BERT-style
        null score (start[0] + end[0], smallest over windows) minus the best
        non-null score. Examples without windows (skipped) get "".
    """
    by_example = collections.defaultdict(list)
    for row, example_index in enumerate(features.example_index):
        by_example[int(example_index)].append(row)
    result = SquadPredictions({}, {}, {}, {})
    log_probs = "start_top_index" in outputs  # the v2 beam's scores are log-probabilities
    for example_index, example in enumerate(examples):
        rows = by_example.get(example_index, [])
        candidates, null_score, null_logits = [], None, (0.0, 0.0)
        for row in rows:
            if version_2:
                if "cls_logits" in outputs:
                    window_null = float(np.reshape(outputs["cls_logits"][row], []))
                    pair = (0.0, 0.0)
                else:
                    pair = (float(outputs["start_logits"][row][0]),
                            float(outputs["end_logits"][row][0]))
                    window_null = sum(pair)
                if null_score is None or window_null < null_score:
                    null_score, null_logits = window_null, pair
            candidates.extend(_valid_spans(features, outputs, row, n_best_size, max_answer_length))
        candidates.sort(key=lambda c: c[2] + c[3], reverse=True)
        nbest = _nbest(example, features, candidates, n_best_size)
        if version_2 and "cls_logits" not in outputs and null_score is not None:
            nbest = _with_null_entry(nbest, null_logits, n_best_size)
        if not nbest:
            nbest = [{"text": "", "start_logit": 0.0, "end_logit": 0.0}]
        for entry, p in zip(nbest, softmax(np.array([e["start_logit"] + e["end_logit"] for e in nbest]))):
            entry["probability"] = float(p)
        best = next((e for e in nbest if e["text"]), None)
        best_text = best["text"] if best else ""
        result.best_non_null[example.qas_id] = best_text
        result.nbest[example.qas_id] = [_nbest_json(e, log_probs) for e in nbest]
        if not version_2:
            continue
        if null_score is None:
            odds = math.inf
        elif "cls_logits" in outputs:
            odds = null_score
        else:
            odds = null_score - (best["start_logit"] + best["end_logit"]) if best else math.inf
        result.null_odds[example.qas_id] = odds
    result.predictions = (answers_at_threshold(result.best_non_null, result.null_odds, null_score_diff_threshold)
                          if version_2 else dict(result.best_non_null))
    return result


def _nbest_json(entry: dict, log_probs: bool) -> dict:
    """An n-best entry as the original writes it: the scores are start_log_prob /
    end_log_prob for the v2 beam (log-probabilities), start_logit / end_logit otherwise."""
    names = ("start_log_prob", "end_log_prob") if log_probs else ("start_logit", "end_logit")
    return {"text": entry["text"], "probability": entry["probability"], names[0]: entry["start_logit"],
            names[1]: entry["end_logit"]}


def _valid_spans(features: SquadFeatures, outputs, row: int, n_best_size: int,
                 max_answer_length: int):
    """Candidates of one window inside its context, where it has max context."""
    offset = int(features.doc_offset[row])
    num_doc = len(features.tok_start_to_orig[row])
    is_max = features.token_is_max_context[row]
    for start, end, start_score, end_score in _window_candidates(outputs, row, n_best_size):
        s, e = start - offset, end - offset
        if s < 0 or e < 0 or s >= num_doc or e >= num_doc:
            continue
        if not is_max[s] or e < s or e - s + 1 > max_answer_length:
            continue
        yield (row, s, start_score, end_score, e)


def _nbest(example: SquadExample, features: SquadFeatures, candidates, n_best_size: int):
    """Distinct answer texts of the best candidates, each a substring of the context."""
    seen, nbest = set(), []
    for row, s, start_score, end_score, e in candidates:
        if len(nbest) >= n_best_size:
            break
        first = int(features.tok_start_to_orig[row][s])
        last = int(features.tok_end_to_orig[row][e])
        answer = example.context_text[first:last + 1].strip()
        if answer in seen:
            continue
        seen.add(answer)
        nbest.append({"text": answer, "start_logit": start_score, "end_logit": end_score})
    return nbest


def _with_null_entry(nbest: List[dict], null_logits: Tuple[float, float],
                     n_best_size: int) -> List[dict]:
    """BERT-style v2: the empty answer competes for a place in the n-best list and
    is appended when it did not make it (n_best_size + 1 entries then)."""
    null_entry = {"text": "", "start_logit": null_logits[0], "end_logit": null_logits[1]}
    ranked = sorted(nbest + [null_entry], key=lambda e: e["start_logit"] + e["end_logit"],
                    reverse=True)
    position = next(i for i, e in enumerate(ranked) if e is null_entry)
    if len(ranked) > n_best_size and position < n_best_size:
        ranked = ranked[:n_best_size]
    return ranked


def write_predictions(result: SquadPredictions, output_dir: str,
                      predictions: Optional[Mapping[str, str]] = None,
                      prefix: str = "") -> Dict[str, str]:
    """Writes <prefix>predictions.json (the official format: {id: answer}),
    <prefix>nbest_predictions.json and, for v2, <prefix>null_odds.json.

    Args:
        result: from `postprocess_predictions`.
        output_dir: the folder (created when missing).
        predictions: answers to write instead of result.predictions (e.g. from
            `answers_at_threshold`).
        prefix: file name prefix.

    Returns:
        {"predictions": path, "nbest": path[, "null_odds": path]}.
    """
    tf.io.gfile.makedirs(output_dir)
    files = {"predictions": (result.predictions if predictions is None else dict(predictions)),
             "nbest": result.nbest}
    if result.null_odds:
        files["null_odds"] = {k: (v if math.isfinite(v) else 1e30) for k, v in
                              result.null_odds.items()}
    names = {"predictions": "predictions.json", "nbest": "nbest_predictions.json",
             "null_odds": "null_odds.json"}
    paths = {}
    for key, content in files.items():
        paths[key] = os.path.join(output_dir, prefix + names[key])
        with atomic_write(paths[key]) as f:
            f.write(json.dumps(content, indent=2, ensure_ascii=False) + "\n")
    return paths
