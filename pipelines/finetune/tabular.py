"""Any labelled text table: CSV, TSV or JSON lines (`--task=csv`).

Files: `data_dir/train.<ext>` and `dev.<ext>`, and `test.<ext>` when present,
where <ext> is csv, tsv or jsonl (the first that exists, in that order). CSV
and TSV files start with a header row naming the columns; a JSON-lines file
holds one object per line. The columns are `text`, optionally `text_b` (a pair
task), and `label`; their names are arguments. Labels are strings; the label
set is learned from the training file (sorted, so the ids do not depend on the
order of the rows), and a dev/test label outside it is an error naming the file
and line. With `regression=True` the label is a number. Evaluating or predicting
with a fine-tuned model reads only the split it needs (`read_split`) and checks
its labels against the model's list, not against a train file.

Example:

>>> data = read_tabular_task("my_data")                     # doctest: +SKIP
>>> data.label_names, len(data.train)                       # doctest: +SKIP
(['negative', 'positive'], 8000)
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from pipelines.finetune.common import TextExample, encode_labels, json_lines, read_delimited, split_file

EXTENSIONS = (".csv", ".tsv", ".jsonl")


@dataclasses.dataclass
class TabularData:
    """The splits of a table task and its labels.

    Attributes:
        train, dev: the examples; test: the test examples or None.
        label_names: sorted labels of the training file ([] for regression).
        regression: float labels.
    """

    train: List[TextExample]
    dev: List[TextExample]
    test: Optional[List[TextExample]]
    label_names: List[str]
    regression: bool = False


def find_split_file(data_dir: str, split: str,
                    extensions: Sequence[str] = EXTENSIONS) -> Optional[str]:
    """data_dir/<split>.csv, .tsv or .jsonl (first found), or None."""
    return split_file(data_dir, *(split + extension for extension in extensions))


def _table_rows(path: str) -> Iterator[Tuple[int, Dict[str, object]]]:
    """(line, {column: value}) of a CSV/TSV (header row) or JSON-lines file."""
    if path.endswith(".jsonl") or path.endswith(".json"):
        yield from _jsonl_rows(path)
        return
    tsv = path.endswith(".tsv")
    header = None
    for line, fields in read_delimited(path, "\t" if tsv else ",", None if tsv else csv.QUOTE_MINIMAL):
        if header is None:
            header = [name.strip() for name in fields]
            continue
        if not fields:
            continue
        if len(fields) != len(header):
            raise ValueError(f"{path}:{line}: {len(fields)} fields but the header has "
                             f"{len(header)} ({header!r}).")
        yield line, dict(zip(header, fields))
    if header is None:
        raise ValueError(f"{path}: the file is empty (a header row is expected).")


def _jsonl_rows(path: str) -> Iterator[Tuple[int, Dict[str, object]]]:
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"Data file not found: {path!r}")
    with tf.io.gfile.GFile(path, "rb") as f:
        lines = f.read().decode("utf-8-sig").split("\n")
    yield from json_lines(path, lines)


def _text(value: object, path: str, line: int, column: str) -> str:
    if value is None:
        raise ValueError(f"{path}:{line}: column {column!r} is null.")
    return value if isinstance(value, str) else str(value)


def _label(value: object, regression: bool, path: str, line: int, column: str):
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{path}:{line}: empty label in column {column!r}.")
    if regression:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{path}:{line}: the label must be a number for regression, "
                             f"got {value!r}.") from None
    if isinstance(value, bool):
        return str(value).lower()  # JSON true/false -> "true"/"false"
    return value.strip() if isinstance(value, str) else str(value)


def read_table(path: str, *, text_column: str = "text", text_b_column: Optional[str] = None,
               label_column: Optional[str] = "label", regression: bool = False,
               label_required: bool = True, split: str = "") -> List[TextExample]:
    """Reads a CSV/TSV/JSONL file of examples.

    Args:
        path: the file; .tsv is tab-separated, with csv.writer's quoting when
            every quote of the file is such (`common.uses_standard_quoting`),
            else without quoting (GLUE's files); .jsonl / .json one object per
            line; anything else comma-separated.
        text_column: the first text's column.
        text_b_column: the second text's column; None uses a column named
            "text_b" when the file has one (else the task is single-text).
        label_column: the label's column.
        regression: parse labels as floats.
        label_required: a missing label column is an error (False for test files,
            whose examples then have label None).
        split: prefix of the generated guids (default: the file's stem).

    Returns:
        The examples (label strings, floats for regression, or None).

    Raises:
        FileNotFoundError: missing file. ValueError: naming file and line, for an
        empty file, a missing column, a malformed line or an empty label.
    """
    split = split or os.path.splitext(os.path.basename(path))[0]
    examples = []
    resolved_b = text_b_column
    for line, row in _table_rows(path):
        if not examples:
            if resolved_b is None and "text_b" in row:
                resolved_b = "text_b"
            wanted = [text_column] + ([resolved_b] if resolved_b else [])
            if label_required and label_column:
                wanted.append(label_column)
            missing = [c for c in wanted if c not in row]
            if missing:
                raise ValueError(f"{path}:{line}: missing column(s) {missing!r}; the columns "
                                 f"are {sorted(row)!r}.")
        for column in (text_column, resolved_b):
            if column and column not in row:
                raise ValueError(f"{path}:{line}: missing column {column!r}.")
        text_a = _text(row[text_column], path, line, text_column)
        text_b = _text(row[resolved_b], path, line, resolved_b) if resolved_b else None
        label = None
        if label_column and label_column in row:
            label = _label(row[label_column], regression, path, line, label_column)
        elif label_required:
            raise ValueError(f"{path}:{line}: missing column {label_column!r}.")
        examples.append(TextExample(f"{split}-{line}", text_a, text_b, label, f"{path}:{line}"))
    if not examples:
        raise ValueError(f"{path}: no examples (the file is empty or has only a header).")
    return examples


def learn_label_names(examples: Sequence[TextExample]) -> List[str]:
    """The sorted set of the examples' labels (deterministic ids).

    >>> learn_label_names([TextExample("1", "x", None, "pos"), TextExample("2", "y", None, "neg")])
    ['neg', 'pos']
    """
    return sorted({e.label for e in examples if e.label is not None})


def read_tabular_task(data_dir: str, *, text_column: str = "text",
                      text_b_column: Optional[str] = None, label_column: str = "label",
                      regression: bool = False,
                      extensions: Sequence[str] = EXTENSIONS) -> TabularData:
    """Reads train, dev and (when present) test of a table task and checks the labels.

    Args:
        data_dir: holds train.<ext> and dev.<ext> (test.<ext> optional).
        text_column, text_b_column, label_column: column names (see read_table).
        regression: numeric labels.
        extensions: file types looked for, in order.

    Returns:
        TabularData; the label set comes from train.

    Raises:
        FileNotFoundError: no train or dev file. ValueError: a dev/test label not
        seen in train (naming file and line), and every read_table error.
    """
    paths = {}
    for split in ("train", "dev"):
        paths[split] = find_split_file(data_dir, split, extensions)
        if paths[split] is None:
            raise FileNotFoundError(
                f"No {split} file in {data_dir!r}: expected one of "
                f"{[split + e for e in extensions]}.")
    kwargs = dict(text_column=text_column, text_b_column=text_b_column,
                  label_column=label_column, regression=regression)
    train = read_table(paths["train"], split="train", **kwargs)
    label_names = [] if regression else learn_label_names(train)
    if not regression and len(label_names) < 2:
        raise ValueError(f"{paths['train']}: classification needs at least two labels, "
                         f"found {label_names!r}.")
    dev = read_table(paths["dev"], split="dev", **kwargs)
    encode_labels(dev, label_names, regression)  # raises on an unknown label
    test = None
    test_path = find_split_file(data_dir, "test", extensions)
    if test_path is not None:
        test = read_table(test_path, split="test", label_required=False, **kwargs)
        labelled = [e for e in test if e.label is not None]
        encode_labels(labelled, label_names, regression)
    return TabularData(train, dev, test, label_names, regression)


def read_split(data_dir: str, split: str, label_names: Sequence[str], *, text_column: str = "text",
               text_b_column: Optional[str] = None, label_column: str = "label", regression: bool = False,
               extensions: Sequence[str] = EXTENSIONS) -> Optional[List[TextExample]]:
    """One split checked against a given label list (a fine-tuned model's), no train file needed.

    Args:
        data_dir: holds <split>.<ext>.
        split: "dev" or "test" (a test file's labels are optional).
        label_names: the labels the model knows ([] for regression).
        text_column, text_b_column, label_column, regression, extensions: as read_tabular_task.

    Returns:
        The examples, or None when the folder has no file for the split.

    Raises:
        ValueError: naming file, line and label, for a label the model does not
        know, and every read_table error.
    """
    path = find_split_file(data_dir, split, extensions)
    if path is None:
        return None
    examples = read_table(path, text_column=text_column, text_b_column=text_b_column,
                          label_column=label_column, regression=regression,
                          label_required=split != "test", split=split)
    encode_labels([e for e in examples if e.label is not None], label_names, regression,
                  label_set="the model's labels")
    return examples
