"""SQuAD v1.1 / v2.0 files -> `SquadExample`s (answers as character offsets in
the original context), with errors that name the file and the question.

Example:

>>> import json, os, tempfile
>>> from pipelines.fileio import atomic_write
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.json")
>>> with atomic_write(path) as f:
...     json.dump({"data": [{"paragraphs": [{"context": "Paris is in France.", "qas": [
...         {"id": "q1", "question": "Where is Paris?",
...          "answers": [{"text": "France", "answer_start": 12}]}]}]}]}, f)
>>> [(e.qas_id, e.answer_text, e.start_char) for e in read_squad_examples(path, is_training=True)]
[('q1', 'France', 12)]
"""

from __future__ import annotations

import dataclasses
import json
from typing import List, Mapping, Optional

import tensorflow as tf


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
