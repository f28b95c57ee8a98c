"""SQuAD v1.1 / v2.0: examples, sliding-window id features and the post-processing
back to answer strings, as the original ALBERT `squad_utils`.

- `read_squad_examples`: the official JSON -> `SquadExample`s (answers are
  character offsets in the original context).
- `convert_examples_to_features`: the context is normalised and cut into
  SentencePiece pieces; the original's banded LCS aligns the characters of the
  original context with those of the concatenated pieces (an example whose
  alignment covers < 80% of the characters is dropped and counted, as the
  original's "MISMATCH DETECTED"); windows of `[CLS] question [SEP] doc [SEP]`
  slide over the pieces with `doc_stride`; a training window without the answer
  (or an impossible question) gets start = end = 0, the [CLS] position; `p_mask`
  is 1 for the question, the [SEP]s and padding.
- `postprocess_predictions`: n-best spans per question (top `n_best_size` starts
  x ends per window, `max_answer_length`, the max-context check, one entry per
  distinct text) mapped back to a substring of the ORIGINAL context; SQuAD v2
  null scores and the null-score-difference threshold (`answers_at_threshold`,
  the one place that rule lives); `write_predictions`
  writes the official predictions.json (plus nbest_predictions.json and, for
  v2, null_odds.json).

Example:

>>> examples = read_squad_examples("dev-v1.1.json", is_training=False)   # doctest: +SKIP
>>> features = convert_examples_to_features(examples, PieceText(vocab), 384, 128, 64,
...                                         is_training=False)            # doctest: +SKIP
>>> outputs = model.predict(features.model_inputs(), batch_size=32)      # doctest: +SKIP
>>> result = postprocess_predictions(examples, features, outputs)        # doctest: +SKIP
>>> write_predictions(result, "out")                                     # doctest: +SKIP
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
from absl import logging

from pipelines.fileio import atomic_write
from pipelines.finetune.common import softmax
from pipelines.finetune.sp_text import PieceText
from pipelines.tokenizer import SPIECE_UNDERLINE

# The original drops an example whose character alignment covers less than this.
MIN_ALIGNMENT_COVERAGE = 0.8
UNIQUE_ID_BASE = 1000000000


@dataclasses.dataclass
class SquadExample:
    """One question.

    Attributes:
        qas_id: the question id.
        question_text: the question.
        context_text: the paragraph, exactly as in the file.
        answer_text: the first gold answer ("" when impossible, None when the
            question has no answer in an unlabelled file).
        start_char: its character offset in context_text (-1 when none).
        is_impossible: SQuAD v2 "no answer".
        gold_answers: every gold answer text (for evaluation).
    """

    qas_id: str
    question_text: str
    context_text: str
    answer_text: Optional[str]
    start_char: int
    is_impossible: bool = False
    gold_answers: List[str] = dataclasses.field(default_factory=list)


def read_squad_examples(path: str, is_training: bool) -> List[SquadExample]:
    """Reads a SQuAD v1.1 or v2.0 JSON file.

    Args:
        path: the JSON file ({"data": [{"paragraphs": [{"context", "qas"}]}]}).
        is_training: each answerable question must have an answer (the first is
            used; the original requires exactly one).

    Raises:
        FileNotFoundError: missing file. ValueError: naming the file (and the
        question id) for malformed JSON, a missing field, or a training question
        without answer that is not marked is_impossible.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"SQuAD file not found: {path!r}")
    with tf.io.gfile.GFile(path, "rb") as f:
        try:
            data = json.loads(f.read().decode("utf-8-sig"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{e.lineno}: malformed JSON ({e.msg}).") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"{path}: not a SQuAD file (no top-level 'data' list).")
    examples = []
    for article in data["data"]:
        for paragraph in _field(article, "paragraphs", path, "article"):
            context = _field(paragraph, "context", path, "paragraph")
            for qa in _field(paragraph, "qas", path, "paragraph"):
                examples.append(_read_question(qa, context, path, is_training))
    if not examples:
        raise ValueError(f"{path}: no questions.")
    return examples


def _field(record: Mapping, key: str, path: str, what: str):
    if not isinstance(record, dict) or key not in record:
        raise ValueError(f"{path}: a {what} has no {key!r} field.")
    return record[key]


def _read_question(qa: Mapping, context: str, path: str, is_training: bool) -> SquadExample:
    qid = str(_field(qa, "id", path, "question"))
    question = _field(qa, "question", path, f"question {qid!r}")
    answers = qa.get("answers", [])
    is_impossible = bool(qa.get("is_impossible", False))
    gold = [a["text"] for a in answers]
    if is_impossible:
        return SquadExample(qid, question, context, "", -1, True, gold)
    if not answers:
        if is_training:
            raise ValueError(f"{path}: question {qid!r} has no answer and is not marked "
                             "is_impossible; training needs one answer per question.")
        return SquadExample(qid, question, context, None, -1, False, gold)
    first = answers[0]
    if "text" not in first or "answer_start" not in first:
        raise ValueError(f"{path}: an answer of question {qid!r} lacks 'text' or 'answer_start'.")
    return SquadExample(qid, question, context, first["text"], int(first["answer_start"]), False,
                        gold)


# ---------------------------------------------------------------------------
# Character alignment between the original context and the pieces.


@dataclasses.dataclass
class ParagraphAlignment:
    """A context's pieces and their character alignment.

    Attributes:
        piece_ids: the ids of the context's pieces.
        tok_start_to_orig, tok_end_to_orig: per piece, the first and last
            character offsets in the original context.
        orig_to_chartok: per original character, its position in the pieces'
            concatenated text (None when unmatched).
        chartok_to_tok: per character of the concatenated pieces, the piece.
        coverage: matched characters / characters of the context.
    """

    piece_ids: List[int]
    tok_start_to_orig: List[int]
    tok_end_to_orig: List[int]
    orig_to_chartok: List[Optional[int]]
    chartok_to_tok: List[int]
    coverage: float


def _lcs_match(orig: Sequence[str], tok_text: str, max_dist: int) -> Tuple[float, Dict]:
    """The original's banded longest-common-subsequence of two character strings.

    Cells outside the band count 0, as in the original's zero-filled matrix.
    Returns the score at (n-1, m-1) and the back-pointers (0 up, 1 left, 2 match).
    """
    n, m = len(orig), len(tok_text)
    back = {}
    prev_row: Dict[int, float] = {}
    for i in range(n):
        row: Dict[int, float] = {}
        for j in range(max(i - max_dist, 0), min(i + max_dist, m)):
            value = 0.0
            if i > 0:
                back[(i, j)] = 0
                value = prev_row.get(j, 0.0)
            if j > 0 and row.get(j - 1, 0.0) > value:
                back[(i, j)] = 1
                value = row[j - 1]
            diagonal = prev_row.get(j - 1, 0.0) if i > 0 and j > 0 else 0.0
            if orig[i] == tok_text[j] and diagonal + 1 > value:
                back[(i, j)] = 2
                value = diagonal + 1
            row[j] = value
        prev_row = row
    return prev_row.get(m - 1, 0.0) if n else 0.0, back


def _convert_index(index: List[Optional[int]], pos: int, m: Optional[int] = None,
                   is_start: bool = True) -> int:
    """The original `_convert_index`: the aligned position of `pos`, or the nearest
    one inside the span when `pos` itself is unmatched."""
    if index[pos] is not None:
        return index[pos]
    n = len(index)
    rear = pos
    while rear < n - 1 and index[rear] is None:
        rear += 1
    front = pos
    while front > 0 and index[front] is None:
        front -= 1
    if index[front] is None:
        if index[rear] >= 1:
            return 0 if is_start else index[rear] - 1
        return index[rear]
    if index[rear] is None:
        if m is not None and index[front] < m - 1:
            return index[front] + 1 if is_start else m - 1
        return index[front]
    if is_start:
        return index[front] + 1 if index[rear] > index[front] + 1 else index[rear]
    return index[rear] - 1 if index[rear] > index[front] + 1 else index[front]


def _identity_alignment(orig: Sequence[str], tok_text: str):
    """The common case, without the O(n * band) search: the pieces spell the
    normalised characters after SentencePiece's leading space. The LCS then
    matches character i to i + 1 (its back-pointers prefer the diagonal)."""
    n = len(orig)
    if len(tok_text) != n + 1 or tok_text[0] != " ":
        return None
    if any(len(c) != 1 or c != tok_text[i + 1] for i, c in enumerate(orig)):
        return None
    return list(range(1, n + 1)), [None] + list(range(n)), float(n)


def _lcs_alignment(orig: Sequence[str], tok_text: str):
    """(orig_to_chartok, chartok_to_orig, score) from the original's banded LCS."""
    n, m = len(orig), len(tok_text)
    max_dist = abs(n - m) + 5
    for _ in range(2):  # the original widens the band once
        score, back = _lcs_match(orig, tok_text, max_dist)
        if score > MIN_ALIGNMENT_COVERAGE * n:
            break
        max_dist *= 2
    orig_to_chartok: List[Optional[int]] = [None] * n
    chartok_to_orig: List[Optional[int]] = [None] * m
    i, j = n - 1, m - 1
    while i >= 0 and j >= 0 and (i, j) in back:
        if back[(i, j)] == 2:
            orig_to_chartok[i], chartok_to_orig[j] = j, i
            i, j = i - 1, j - 1
        elif back[(i, j)] == 1:
            j -= 1
        else:
            i -= 1
    return orig_to_chartok, chartok_to_orig, score


def align_paragraph(context: str, text: PieceText) -> Optional[ParagraphAlignment]:
    """Pieces of a context and the original's character alignment; None when the
    alignment covers less than 80% of the characters (the original drops those)."""
    pieces = text.encode_pieces(text.normalize(context))
    chartok_to_tok, tok_start_to_chartok, tok_end_to_chartok = [], [], []
    count = 0
    for i, piece in enumerate(pieces):
        surface = piece.replace(SPIECE_UNDERLINE, " ")
        chartok_to_tok.extend([i] * len(surface))
        tok_start_to_chartok.append(count)
        count += len(surface)
        tok_end_to_chartok.append(count - 1)
    tok_text = "".join(pieces).replace(SPIECE_UNDERLINE, " ")
    n, m = len(context), len(tok_text)
    if n == 0 or m == 0:
        return None
    orig = [text.normalize_char(c) for c in context]
    aligned = _identity_alignment(orig, tok_text)
    if aligned is None:
        aligned = _lcs_alignment(orig, tok_text)
    orig_to_chartok, chartok_to_orig, score = aligned
    if all(v is None for v in orig_to_chartok) or score < MIN_ALIGNMENT_COVERAGE * n:
        return None
    starts = [_convert_index(chartok_to_orig, p, n, is_start=True) for p in tok_start_to_chartok]
    ends = [_convert_index(chartok_to_orig, p, n, is_start=False) for p in tok_end_to_chartok]
    return ParagraphAlignment(text.piece_ids(pieces), starts, ends, orig_to_chartok,
                              chartok_to_tok, score / n)


# ---------------------------------------------------------------------------
# Features.


@dataclasses.dataclass
class SquadFeatures:
    """Windows of every example, as arrays, plus what post-processing needs.

    Array attributes ([N, max_seq_length] int32 unless said): input_ids,
    input_mask, segment_ids, p_mask; [N] int32: start_positions, end_positions,
    is_impossible, example_index, doc_offset (position of the first context
    piece); [N] int64 unique_ids. Per window (lists of int32/bool arrays over
    its context pieces): tok_start_to_orig, tok_end_to_orig, token_is_max_context.
    Counts: num_examples, skipped_alignment (the original's "MISMATCH
    DETECTED"), skipped_answer (training answers whose offsets fall outside the
    context: the original fails on them), mismatched_answer (training answers
    whose text differs from the context at answer_start: trained on the
    span the offsets give, as the original).
    """

    input_ids: np.ndarray
    input_mask: np.ndarray
    segment_ids: np.ndarray
    p_mask: np.ndarray
    start_positions: np.ndarray
    end_positions: np.ndarray
    is_impossible: np.ndarray
    example_index: np.ndarray
    unique_ids: np.ndarray
    doc_offset: np.ndarray
    tok_start_to_orig: List[np.ndarray]
    tok_end_to_orig: List[np.ndarray]
    token_is_max_context: List[np.ndarray]
    num_examples: int = 0
    skipped_alignment: int = 0
    skipped_answer: int = 0
    mismatched_answer: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)

    def model_inputs(self, include_p_mask: bool = True) -> Dict[str, np.ndarray]:
        """The id inputs of the span model."""
        x = {"input_ids": self.input_ids, "input_mask": self.input_mask,
             "segment_ids": self.segment_ids}
        if include_p_mask:
            x["p_mask"] = self.p_mask
        return x

    def labels(self, version_2: bool = False) -> Dict[str, np.ndarray]:
        """start_positions, end_positions (and is_impossible for v2)."""
        y = {"start_positions": self.start_positions, "end_positions": self.end_positions}
        if version_2:
            y["is_impossible"] = self.is_impossible
        return y


def _doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> List[Tuple[int, int]]:
    """(start, length) windows over the context pieces, as the original."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def _is_max_context(spans: Sequence[Tuple[int, int]], span_index: int, position: int) -> bool:
    """Is `span_index` the window where `position` has the most context on both sides?"""
    best_score, best_index = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_index = score, index
    return span_index == best_index


def _answer_pieces(example: SquadExample,
                   alignment: ParagraphAlignment) -> Optional[Tuple[int, int]]:
    """First and last piece of the characters answer_start .. answer_start +
    len(answer) - 1, or None when they fall outside the context.

    As the original, the offsets decide: an answer text that differs from the
    context there still trains on the span the offsets give.
    """
    start = example.start_char
    end = start + len(example.answer_text) - 1
    if start < 0 or end >= len(example.context_text) or end < start:
        return None
    start_chartok = _convert_index(alignment.orig_to_chartok, start, is_start=True)
    end_chartok = _convert_index(alignment.orig_to_chartok, end, is_start=False)
    first = alignment.chartok_to_tok[start_chartok]
    last = alignment.chartok_to_tok[end_chartok]
    return (first, last) if first <= last else None


def convert_examples_to_features(examples: Sequence[SquadExample], text: PieceText,
                                 max_seq_length: int = 384, doc_stride: int = 128,
                                 max_query_length: int = 64, is_training: bool = False
                                 ) -> SquadFeatures:
    """Sliding-window features of SQuAD examples (see the module docstring).

    Args:
        examples: from `read_squad_examples`.
        text: the SentencePiece text helper (vocabulary and lower-casing of the model).
        max_seq_length: window length T (padded to it).
        doc_stride: step between window starts, in pieces.
        max_query_length: question pieces kept.
        is_training: training features: an answer whose offsets fall outside
            the context skips the example (counted: the original fails on it);
            one whose text differs from the context at answer_start is trained
            on the span its offsets give, as the original (counted). Answer
            positions are computed whenever the example has an answer
            (start = end = 0 for impossible questions, windows without the
            answer and, outside training, answers that cannot be placed).

    Returns:
        SquadFeatures (skips logged).

    Raises:
        ValueError: when max_seq_length leaves no room for the context.
    """
    if max_seq_length - max_query_length - 3 <= 0:
        raise ValueError(f"max_seq_length={max_seq_length} leaves no room for the context after "
                         f"max_query_length={max_query_length} and 3 special tokens.")
    if doc_stride <= 0:
        raise ValueError(f"doc_stride must be positive, got {doc_stride}.")
    rows = collections.defaultdict(list)
    cache: Dict[str, Optional[ParagraphAlignment]] = {}
    skipped_alignment = skipped_answer = mismatched_answer = 0
    for example_index, example in enumerate(examples):
        if example.context_text not in cache:
            cache[example.context_text] = align_paragraph(example.context_text, text)
        alignment = cache[example.context_text]
        if alignment is None:
            skipped_alignment += 1
            logging.info("SQuAD %s: context alignment below %.0f%%, skipped (as the original).",
                         example.qas_id, 100 * MIN_ALIGNMENT_COVERAGE)
            continue
        answer = None
        if not example.is_impossible and example.answer_text is not None:
            # Dev answers get positions too (an eval loss); only training skips a bad one.
            answer = _answer_pieces(example, alignment)
            if answer is None and is_training:
                skipped_answer += 1
                logging.warning("SQuAD %s: answer %r at %d lies outside the context, skipped.",
                                example.qas_id, example.answer_text, example.start_char)
                continue
            start = example.start_char
            if is_training and example.context_text[start:start + len(example.answer_text)] != example.answer_text:
                mismatched_answer += 1
        elif is_training and not example.is_impossible:
            raise ValueError(f"SQuAD question {example.qas_id!r} has no answer for training.")
        query = text.encode_ids(example.question_text)[:max_query_length]
        _append_windows(rows, example_index, example.is_impossible, query, alignment, answer,
                        text, max_seq_length, doc_stride)
    if skipped_alignment or skipped_answer:
        logging.warning("SQuAD features: %d of %d examples skipped (%d alignment, %d answer outside "
                        "the context).", skipped_alignment + skipped_answer, len(examples),
                        skipped_alignment, skipped_answer)
    if mismatched_answer:
        logging.warning("SQuAD features: %d of %d training answers differ from the context at their "
                        "answer_start; trained on the span the offsets give, as the original.",
                        mismatched_answer, len(examples))
    features = _stack(rows, max_seq_length, len(examples), skipped_alignment, skipped_answer)
    features.mismatched_answer = mismatched_answer
    return features


def _append_windows(rows, example_index, is_impossible, query, alignment, answer, text,
                    max_seq_length, doc_stride) -> None:
    doc_ids = alignment.piece_ids
    spans = _doc_spans(len(doc_ids), max_seq_length - len(query) - 3, doc_stride)
    doc_offset = len(query) + 2
    for span_index, (start, length) in enumerate(spans):
        ids = [text.cls_id] + query + [text.sep_id] + doc_ids[start:start + length] + [text.sep_id]
        segments = [0] * (len(query) + 2) + [1] * (length + 1)
        p_mask = [0] + [1] * (len(query) + 1) + [0] * length + [1]
        pad = max_seq_length - len(ids)
        start_position = end_position = 0
        window_impossible = is_impossible
        if answer is not None:
            if start <= answer[0] and answer[1] <= start + length - 1:
                start_position = answer[0] - start + doc_offset
                end_position = answer[1] - start + doc_offset
            else:
                window_impossible = True
        rows["input_ids"].append(ids + [text.pad_id] * pad)
        rows["input_mask"].append([1] * len(ids) + [0] * pad)
        rows["segment_ids"].append(segments + [0] * pad)
        rows["p_mask"].append(p_mask + [1] * pad)
        rows["start_positions"].append(start_position)
        rows["end_positions"].append(end_position)
        rows["is_impossible"].append(int(window_impossible))
        rows["example_index"].append(example_index)
        rows["doc_offset"].append(doc_offset)
        rows["tok_start_to_orig"].append(
            np.asarray(alignment.tok_start_to_orig[start:start + length], np.int32))
        rows["tok_end_to_orig"].append(
            np.asarray(alignment.tok_end_to_orig[start:start + length], np.int32))
        rows["token_is_max_context"].append(np.asarray(
            [_is_max_context(spans, span_index, start + k) for k in range(length)], bool))


def _stack(rows, max_seq_length, num_examples, skipped_alignment, skipped_answer) -> SquadFeatures:
    def matrix(key):
        return np.asarray(rows[key], np.int32).reshape(-1, max_seq_length)

    def vector(key):
        return np.asarray(rows[key], np.int32).reshape(-1)

    count = len(rows["input_ids"])
    return SquadFeatures(
        input_ids=matrix("input_ids"), input_mask=matrix("input_mask"),
        segment_ids=matrix("segment_ids"), p_mask=matrix("p_mask"),
        start_positions=vector("start_positions"), end_positions=vector("end_positions"),
        is_impossible=vector("is_impossible"), example_index=vector("example_index"),
        unique_ids=UNIQUE_ID_BASE + np.arange(count, dtype=np.int64),
        doc_offset=vector("doc_offset"), tok_start_to_orig=list(rows["tok_start_to_orig"]),
        tok_end_to_orig=list(rows["tok_end_to_orig"]),
        token_is_max_context=list(rows["token_is_max_context"]), num_examples=num_examples,
        skipped_alignment=skipped_alignment, skipped_answer=skipped_answer)


# ---------------------------------------------------------------------------
# Post-processing.


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
