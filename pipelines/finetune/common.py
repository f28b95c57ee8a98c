"""What the text-classification readers share: the example record, label
encoding with errors that name the file and line, and the tf.data builder of
raw strings for Keras `fit` (the task models tokenize inside the graph).

Example:

>>> examples = [TextExample("train-1", "a good film", None, "1", "train.tsv:2"),
...             TextExample("train-2", "a dull film", None, "0", "train.tsv:3")]
>>> encode_labels(examples, ["0", "1"]).tolist()
[1, 0]
>>> ds = text_dataset(examples, ["0", "1"], batch_size=2)
>>> [t.shape.as_list() for t in ds.element_spec]
[[None], [None]]
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sys
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

Label = Union[str, float, None]


@dataclasses.dataclass(frozen=True)
class TextExample:
    """One classification/regression example as read from a file.

    Attributes:
        guid: a unique id (the file's id column where it has one, else split-line).
        text_a: the first (or only) text.
        text_b: the second text of a pair task, else None.
        label: the label name (str), a float for regression, None when unlabelled.
        source: "file:line" of the example, for error messages.
    """

    guid: str
    text_a: str
    text_b: Optional[str]
    label: Label
    source: str = ""


def _raise_csv_field_limit() -> None:
    # Long paragraphs exceed the csv module's 128 KiB default field limit.
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def read_delimited(path: str, delimiter: str, quoting: int = csv.QUOTE_MINIMAL
                   ) -> Iterator[Tuple[int, List[str]]]:
    """Yields (line number, fields) of a CSV/TSV file (UTF-8, a BOM is dropped).

    Args:
        path: the file (anything tf.io.gfile opens).
        delimiter: "," or "\\t".
        quoting: csv.QUOTE_MINIMAL for CSV; csv.QUOTE_NONE for TSV (GLUE's
            files have unbalanced quotes inside fields).

    Raises:
        FileNotFoundError: naming the file.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"Data file not found: {path!r}")
    _raise_csv_field_limit()
    with tf.io.gfile.GFile(path, "rb") as f:
        text = f.read().decode("utf-8-sig")
    kwargs = {"quotechar": None} if quoting == csv.QUOTE_NONE else {}
    # newline="": only \n / \r\n end a record (not U+2028 inside a text).
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting,
                        **kwargs)
    for fields in reader:
        yield reader.line_num, fields


def encode_labels(examples: Sequence[TextExample], label_names: Sequence[str],
                  regression: bool = False) -> np.ndarray:
    """Label ids (int32) or regression targets (float32) of labelled examples.

    Args:
        examples: the examples; every one must have a label.
        label_names: the label list; a label's id is its index.
        regression: labels are floats (label_names is ignored).

    Raises:
        ValueError: naming the example's file and line, for a missing label or a
            label not in `label_names`.
    """
    if regression:
        values = []
        for example in examples:
            if example.label is None:
                raise ValueError(f"{example.source}: example {example.guid!r} has no label.")
            values.append(float(example.label))
        return np.asarray(values, dtype=np.float32)
    index = {name: i for i, name in enumerate(label_names)}
    ids = []
    for example in examples:
        if example.label not in index:
            what = "has no label" if example.label is None else f"has label {example.label!r}"
            raise ValueError(f"{example.source}: example {example.guid!r} {what}, "
                             f"not one of the label set {list(label_names)!r}.")
        ids.append(index[example.label])
    return np.asarray(ids, dtype=np.int32)


def text_dataset(examples: Sequence[TextExample], label_names: Optional[Sequence[str]] = None,
                 *, regression: bool = False, with_labels: bool = True,
                 batch_size: Optional[int] = None, shuffle: bool = False, seed: int = 0,
                 drop_remainder: bool = False) -> tf.data.Dataset:
    """A dataset of raw strings for Keras `fit` / `evaluate` / `predict`.

    Elements are `(text, label)` for single-text tasks and `((text, text_pair),
    label)` for pair tasks (text tf.string [B]; label int32 ids, or float32 for
    regression); without labels just `text` or `(text, text_pair)`.

    Args:
        examples: the examples (all with text_b, or all without).
        label_names: the label list (ignored for regression).
        regression: float labels.
        with_labels: include the labels (False for unlabelled test files).
        batch_size: batch the dataset when given.
        shuffle: shuffle all examples (seeded; reshuffled every epoch).
        seed: the shuffle seed.
        drop_remainder: passed to `batch`.

    Raises:
        ValueError: on no examples, a mix of single and pair examples, or a bad label.
    """
    if not examples:
        raise ValueError("text_dataset: no examples.")
    has_pair = [e.text_b is not None for e in examples]
    if any(has_pair) and not all(has_pair):
        lone = examples[has_pair.index(False)]
        raise ValueError(f"{lone.source}: example {lone.guid!r} has no second text while "
                         "others have one; every example of a pair task needs text_b.")
    texts = tf.constant([e.text_a for e in examples], dtype=tf.string)
    features = texts
    if has_pair[0]:
        features = (texts, tf.constant([e.text_b for e in examples], dtype=tf.string))
    if with_labels:
        if not regression and label_names is None:
            raise ValueError("text_dataset: label_names is required for classification labels.")
        labels = encode_labels(examples, label_names or [], regression)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    else:
        dataset = tf.data.Dataset.from_tensor_slices(features)
    if shuffle:
        dataset = dataset.shuffle(len(examples), seed=seed, reshuffle_each_iteration=True)
    if batch_size:
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return dataset


def json_lines(path: str, lines: Sequence[str]) -> Iterator[Tuple[int, dict]]:
    """(line number, object) of every non-blank line of a JSON-lines file.

    Raises:
        ValueError: naming the file and line of a malformed line or a non-object.
    """
    for line, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{line}: malformed JSON ({e.msg} at column {e.colno}).") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{line}: expected a JSON object, got {type(record).__name__}.")
        yield line, record
