"""GLUE in its usual TSV layout, read as the original ALBERT processors read it.

Files: `data_dir/<TASK>/{train,dev,test}.tsv` with the GLUE folder names (CoLA,
SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI); MNLI's dev and test files are
dev_matched/test_matched ("mnli") or dev_mismatched/test_mismatched ("mnli-mm").
When `data_dir/<TASK>/` does not exist, the files are looked for in `data_dir`.

Columns, headers and label lists are the original's (reference §6): CoLA has
no header in train/dev; STS-B is a regression with float labels and no label
names; test files are unlabelled (label None) and their guid is the file's id
column, as the submission files need. QQP lines with too few fields are skipped
and counted, as the original does for the training file's garbage lines; every
other missing column is an error naming the file and line.

Example:

>>> examples, label_names = read_glue("glue_data", "mrpc", "train")  # doctest: +SKIP
>>> label_names                                          # doctest: +SKIP
['0', '1']
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import List, Optional, Tuple

import tensorflow as tf
from absl import logging

from pipelines.finetune.common import TextExample, read_delimited

SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """How the original processor reads one GLUE task.

    Attributes:
        name: canonical task name.
        folder: the GLUE folder name under data_dir.
        label_names: the label list ([] for the regression task STS-B).
        text_a, text_b, label: column indices of labelled files (text_b None for
            single-sentence tasks).
        test_text_a, test_text_b: column indices of the test file.
        labelled_header: whether train/dev files start with a header line.
        dev_file, test_file: file stems of the dev and test splits.
        skip_short_lines: skip (and count) train/dev lines with too few fields
            (QQP, as the original); a short test line is an error naming it.
    """

    name: str
    folder: str
    label_names: Tuple[str, ...]
    text_a: int
    text_b: Optional[int]
    label: int
    test_text_a: int
    test_text_b: Optional[int]
    labelled_header: bool = True
    dev_file: str = "dev"
    test_file: str = "test"
    skip_short_lines: bool = False

    @property
    def is_regression(self) -> bool:
        return not self.label_names


_BINARY = ("0", "1")
_NLI = ("entailment", "not_entailment")
_MNLI = ("contradiction", "entailment", "neutral")

GLUE_TASKS = {
    "cola": GlueTask("cola", "CoLA", _BINARY, 3, None, 1, 1, None, labelled_header=False),
    "sst-2": GlueTask("sst-2", "SST-2", _BINARY, 0, None, 1, 1, None),
    "mrpc": GlueTask("mrpc", "MRPC", _BINARY, 3, 4, 0, 3, 4),
    "sts-b": GlueTask("sts-b", "STS-B", (), 7, 8, -1, 7, 8),
    "qqp": GlueTask("qqp", "QQP", _BINARY, 3, 4, 5, 1, 2, skip_short_lines=True),
    "mnli": GlueTask("mnli", "MNLI", _MNLI, 8, 9, -1, 8, 9, dev_file="dev_matched",
                     test_file="test_matched"),
    "mnli-mm": GlueTask("mnli-mm", "MNLI", _MNLI, 8, 9, -1, 8, 9, dev_file="dev_mismatched",
                        test_file="test_mismatched"),
    "qnli": GlueTask("qnli", "QNLI", _NLI, 1, 2, -1, 1, 2),
    "rte": GlueTask("rte", "RTE", _NLI, 1, 2, -1, 1, 2),
    "wnli": GlueTask("wnli", "WNLI", _BINARY, 1, 2, -1, 1, 2),
}

_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "mismnli": "mnli-mm", "mnli_mismatched": "mnli-mm",
            "mnli-mismatched": "mnli-mm", "mnli_matched": "mnli", "mnli-matched": "mnli"}


def glue_task(name: str) -> GlueTask:
    """The task description of a name like "sst-2", "SST2" or "glue/mnli-mm".

    >>> glue_task("glue/SST2").folder
    'SST-2'

    Raises:
        ValueError: quoting the name and listing the known tasks.
    """
    key = name.lower().strip()
    if key.startswith("glue/"):
        key = key[len("glue/"):]
    key = _ALIASES.get(key, key)
    if key not in GLUE_TASKS:
        raise ValueError(f"Unknown GLUE task {name!r}; known: {sorted(GLUE_TASKS)}.")
    return GLUE_TASKS[key]


def glue_file(data_dir: str, task: str, split: str) -> str:
    """The path of a split's TSV (data_dir/<TASK>/..., else data_dir/...)."""
    spec = glue_task(task)
    if split not in SPLITS:
        raise ValueError(f"GLUE split must be one of {SPLITS}, got {split!r}.")
    stem = {"train": "train", "dev": spec.dev_file, "test": spec.test_file}[split]
    task_dir = os.path.join(data_dir, spec.folder)
    folder = task_dir if tf.io.gfile.isdir(task_dir) else data_dir
    return os.path.join(folder, stem + ".tsv")


def _field(fields: List[str], index: int, path: str, line: int, what: str) -> str:
    try:
        return fields[index]
    except IndexError:
        raise ValueError(f"{path}:{line}: missing {what} column {index} (the line has "
                         f"{len(fields)} tab-separated fields).") from None


def read_glue(data_dir: str, task: str, split: str) -> Tuple[List[TextExample], List[str]]:
    """Reads one split of a GLUE task.

    Args:
        data_dir: the GLUE folder (holding CoLA/, SST-2/, ...) or the task's folder.
        task: the task name ("cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli",
            "mnli-mm", "qnli", "rte", "wnli"; "glue/" prefix allowed).
        split: "train", "dev" or "test".

    Returns:
        (examples, label_names): examples with label names (strings), float
        labels for STS-B, None for test; label_names [] for STS-B.

    Raises:
        FileNotFoundError: the file is missing.
        ValueError: naming file and line, for an empty file, a missing column
            (also on a QQP test line: only train/dev skip them), a label outside
            the task's label list or a non-numeric STS-B score.
    """
    spec = glue_task(task)
    path = glue_file(data_dir, task, split)
    labelled = split != "test"
    has_header = spec.labelled_header or not labelled
    examples, skipped, seen_line = [], 0, False
    for line, fields in read_delimited(path, "\t", quoting=csv.QUOTE_NONE):
        if not seen_line:
            seen_line = True
            if has_header:
                continue
        if not fields:
            continue  # a blank line
        if labelled:
            text_a_col, text_b_col = spec.text_a, spec.text_b
        else:
            text_a_col, text_b_col = spec.test_text_a, spec.test_text_b
        needed = max(c for c in (text_a_col, text_b_col, spec.label if labelled else 0)
                     if c is not None and c >= 0)
        # The original skips QQP's garbage train/dev lines; on a test line it
        # fails (a skipped row would be missing from submit_results.tsv).
        if spec.skip_short_lines and labelled and len(fields) <= needed:
            skipped += 1
            continue
        text_a = _field(fields, text_a_col, path, line, "text_a")
        text_b = None if text_b_col is None else _field(fields, text_b_col, path, line, "text_b")
        if labelled:
            guid, label = f"{split}-{line}", _field(fields, spec.label, path, line, "label")
            label = _parse_label(spec, label, path, line)
        else:
            guid, label = _field(fields, 0, path, line, "id"), None
        examples.append(TextExample(guid, text_a, text_b, label, f"{path}:{line}"))
    if skipped:
        logging.warning("%s: skipped %d lines with too few fields (as the original %s reader).",
                        path, skipped, spec.name)
    if not examples:
        raise ValueError(f"{path}: no examples (the file is empty or has only a header).")
    return examples, list(spec.label_names)


def _parse_label(spec: GlueTask, label: str, path: str, line: int):
    if spec.is_regression:
        try:
            return float(label)
        except ValueError:
            raise ValueError(f"{path}:{line}: the {spec.name} score must be a number, "
                             f"got {label!r}.") from None
    if label not in spec.label_names:
        raise ValueError(f"{path}:{line}: label {label!r} is not one of the {spec.name} labels "
                         f"{list(spec.label_names)!r}.")
    return label
