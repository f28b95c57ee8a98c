"""RACE (reading comprehension, 4 options per question) as the original `race_utils`.

Files: `data_dir/RACE/<split>/{middle,high}/` (or `data_dir/<split>/...`) holding
either `all.txt` (one JSON record per line, the original's layout) or the
distribution's one-record-per-file `*.txt`. A record has `article`,
`questions`, `options` (4 per question), `answers` (letters) and `id`. Every
question becomes one example: the context is the article and each choice text
is `question.replace("_", option)` when the question has a blank, else
`question + " " + option`. The model packs `[CLS] context [SEP] qa [SEP]`
keeping the qa's last max_qa_length pieces (AlbertMultipleChoice).

Example:

>>> build_choice("The cat sat on the _.", "mat")
'The cat sat on the mat.'
>>> build_choice("Where did the cat sit?", "On the mat")
'Where did the cat sit? On the mat'
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterator, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf

from pipelines.finetune.common import json_lines

LEVELS = ("middle", "high")
NUM_CHOICES = 4


@dataclasses.dataclass(frozen=True)
class RaceExample:
    """One question with its choices.

    Attributes:
        example_id: the record id and question number, e.g. "high123.txt-0".
        context: the article.
        choices: the qa texts, one per option.
        label: the index of the right option, None when the record has no answers.
        level: "middle" or "high".
        source: "file:line" of the record.
    """

    example_id: str
    context: str
    choices: Tuple[str, ...]
    label: Optional[int]
    level: str
    source: str


def build_choice(question: str, option: str) -> str:
    """The original's qa text of one option."""
    if "_" in question:
        return question.replace("_", option)
    return question + " " + option


def race_files(data_dir: str, split: str, level: str) -> List[str]:
    """The files of one split and level: all.txt when present, else every *.txt."""
    base = os.path.join(data_dir, "RACE")
    if not tf.io.gfile.isdir(os.path.join(base, split)):
        base = data_dir
    folder = os.path.join(base, split, level)
    if not tf.io.gfile.isdir(folder):
        return []
    combined = os.path.join(folder, "all.txt")
    if tf.io.gfile.exists(combined):
        return [combined]
    return sorted(tf.io.gfile.glob(os.path.join(folder, "*.txt")))


def _records(path: str) -> Iterator[Tuple[int, Mapping]]:
    """(line, record) of a file holding one JSON record, or one per line."""
    with tf.io.gfile.GFile(path, "rb") as f:
        content = f.read().decode("utf-8-sig")
    if not content.strip():
        raise ValueError(f"{path}: the file is empty.")
    try:
        whole = json.loads(content)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole
        return
    yield from json_lines(path, content.split("\n"))


def _record_examples(record: Mapping, level: str, source: str,
                     num_choices: int) -> List[RaceExample]:
    for key in ("article", "questions", "options"):
        if key not in record:
            raise ValueError(f"{source}: missing field {key!r}.")
    questions, options = record["questions"], record["options"]
    answers = record.get("answers")
    if len(options) != len(questions) or (answers is not None and len(answers) != len(questions)):
        raise ValueError(f"{source}: {len(questions)} questions, {len(options)} option lists and "
                         f"{'no' if answers is None else len(answers)} answers; they must match.")
    record_id = str(record.get("id", source))
    examples = []
    for i, question in enumerate(questions):
        if len(options[i]) != num_choices:
            raise ValueError(f"{source}: question {i} has {len(options[i])} options, "
                             f"expected {num_choices}.")
        label = None
        if answers is not None:
            answer = answers[i]
            label = ord(answer) - ord("A") if isinstance(answer, str) and len(answer) == 1 else -1
            if not 0 <= label < num_choices:
                raise ValueError(f"{source}: question {i} has answer {answers[i]!r}, expected "
                                 f"a letter A-{chr(ord('A') + num_choices - 1)}.")
        choices = tuple(build_choice(question, option) for option in options[i])
        examples.append(RaceExample(f"{record_id}-{i}", record["article"], choices, label, level,
                                    source))
    return examples


def read_race(data_dir: str, split: str, levels: Sequence[str] = LEVELS,
              num_choices: int = NUM_CHOICES) -> List[RaceExample]:
    """Reads one split ("train", "dev" or "test") of RACE.

    Args:
        data_dir: the folder holding RACE/ (or the RACE folder itself).
        split: the split folder name.
        levels: the level folders to read, in order.
        num_choices: options per question.

    Returns:
        The examples, level by level, file by file, in order.

    Raises:
        FileNotFoundError: no file for the split. ValueError: naming the file and
        line, for malformed JSON, a missing field, a wrong number of options or
        an answer that is not a letter of an option.
    """
    examples, files = [], []
    for level in levels:
        for path in race_files(data_dir, split, level):
            files.append(path)
            for line, record in _records(path):
                examples.extend(_record_examples(record, level, f"{path}:{line}", num_choices))
    if not files:
        raise FileNotFoundError(f"No RACE files for split {split!r} under {data_dir!r}: expected "
                                f"RACE/{split}/{{{','.join(levels)}}}/all.txt or *.txt.")
    if not examples:
        raise ValueError(f"No RACE questions in {files!r}.")
    return examples
