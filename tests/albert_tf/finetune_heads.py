"""Every fine-tuning head as a tiny albert-finetune task: its --task, a data folder maker and its options.

Shared by the static-shape and XLA tests. The classification data has texts of 1 to 12 words, so
that batches have many lengths (the data of tests/albert_tf/tasks/finetune_data.py has 4-word
sentences); the other heads use that module's data. Sizes are chosen so that neither the training
items nor the dev items divide into batches of 4 (`BATCH`): a remainder to drop, a last batch to pad.
"""

import csv
import os
from typing import Callable, Dict, NamedTuple

import numpy as np

from tests.albert_tf.tasks import finetune_data

BATCH = 4
MAX_SEQ_LENGTH = 32
LENGTH_STEP = 8  # the fixed lengths: 8, 16, 24, 32


def _texts(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(finetune_data.WORDS, size=int(rng.integers(1, 13)))) for _ in range(n)]


def _write_csv(path, header, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def sst2(folder: str, n_train: int = 14, n_dev: int = 7) -> str:
    """GLUE SST-2 layout; label: does the text hold "ka"?"""
    os.makedirs(folder, exist_ok=True)
    for split, n, seed in (("train", n_train, 0), ("dev", n_dev, 1)):
        with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("sentence\tlabel\n")
            f.writelines(f"{text}\t{int('ka' in text.split())}\n" for text in _texts(n, seed))
    return folder


def pairs(folder: str, n_train: int = 14, n_dev: int = 7) -> str:
    """csv with text, text_b and a string label (same first word?)."""
    os.makedirs(folder, exist_ok=True)
    for split, n, seed in (("train", n_train, 2), ("dev", n_dev, 3)):
        a, b = _texts(n, seed), _texts(n, seed + 10)
        _write_csv(os.path.join(folder, f"{split}.csv"), ["text", "text_b", "label"],
                   [[x, y, ["different", "same"][x.split()[0] == y.split()[0]]] for x, y in zip(a, b)])
    return folder


def regression(folder: str, n_train: int = 14, n_dev: int = 7) -> str:
    """csv with text and a float label (the share of "ka" words)."""
    os.makedirs(folder, exist_ok=True)
    for split, n, seed in (("train", n_train, 4), ("dev", n_dev, 5)):
        _write_csv(os.path.join(folder, f"{split}.csv"), ["text", "label"],
                   [[t, f"{t.split().count('ka') / len(t.split()):.3f}"] for t in _texts(n, seed)])
    return folder


class Head(NamedTuple):
    """One head: the --task, a data maker (folder -> folder) and its `TaskOptions` fields."""

    task: str
    make_data: Callable[[str], str]
    options: Dict = {}


HEADS: Dict[str, Head] = {
    "classifier_single": Head("glue/sst-2", sst2),
    "classifier_pair": Head("csv", pairs, {"text_b_column": "text_b"}),
    "classifier_regression": Head("csv", regression, {"regression": True}),
    "span_qa_v1": Head("squad_v1", lambda d: finetune_data.squad(d, n_train=5, n_dev=2),
                       {"n_best_size": 3, "max_answer_length": 4}),
    "span_qa_v2": Head("squad_v2", lambda d: finetune_data.squad(d, version_2=True, n_train=3, n_dev=1),
                       {"n_best_size": 3, "max_answer_length": 4}),
    "multiple_choice": Head("race", lambda d: finetune_data.race(d, n_train=3, n_dev=3)),
    "tagging": Head("tagging", lambda d: finetune_data.conll(d, n_train=14, n_dev=7)),
}


def task_options(head: Head, spm: str, **changes):
    """The head's `TaskOptions`: max_seq_length 32, no dropout, lengths from multiples of 8."""
    from albert_tf.tasks.base import TaskOptions

    values = dict(max_seq_length=MAX_SEQ_LENGTH, spm_model_file=spm, max_query_length=8, doc_stride=8,
                  max_qa_length=16, dropout_rate=0.0, static_length_step=LENGTH_STEP)
    values.update(head.options)
    values.update(changes)
    return TaskOptions(**values)
