"""SQuAD examples -> sliding-window id features: windows of
`[CLS] question [SEP] doc [SEP]` slide over the context's pieces with
`doc_stride`; a training window without the answer (or an impossible question)
gets start = end = 0, the [CLS] position; `p_mask` is 1 for the question, the
[SEP]s and padding; each context piece records whether this window gives it
the most context (`is_max_context`), which post-processing needs.

Example:

>>> doc_spans(10, 4, 3)
[(0, 4), (3, 4), (6, 4)]
>>> [is_max_context([(0, 4), (3, 4), (6, 4)], 1, p) for p in (3, 4, 5)]
[False, True, True]
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import logging

from pipelines.finetune.sp_text import PieceText
from pipelines.finetune.squad.alignment import (MIN_ALIGNMENT_COVERAGE, ParagraphAlignment,
                                                align_paragraph, convert_index)
from pipelines.finetune.squad.examples import SquadExample

UNIQUE_ID_BASE = 1000000000


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


def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> List[Tuple[int, int]]:
    """(start, length) windows over the context pieces, as the original."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def is_max_context(spans: Sequence[Tuple[int, int]], span_index: int, position: int) -> bool:
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
    start_chartok = convert_index(alignment.orig_to_chartok, start, is_start=True)
    end_chartok = convert_index(alignment.orig_to_chartok, end, is_start=False)
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
    spans = doc_spans(len(doc_ids), max_seq_length - len(query) - 3, doc_stride)
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
            [is_max_context(spans, span_index, start + k) for k in range(length)], bool))


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
