"""What the fine-tuning readers share: the example record, label encoding with
errors that name the file and line, delimited/JSON-lines reading, and the
training streams: seeded passes over the items (`shuffled_pass`,
`length_bucketed_pass`) fed by `passes_dataset` from any batch on.

Example:

>>> examples = [TextExample("train-1", "a good film", None, "1", "train.tsv:2"),
...             TextExample("train-2", "a dull film", None, "0", "train.tsv:3")]
>>> encode_labels(examples, ["0", "1"]).tolist()
[1, 0]
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import sys
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
from absl import logging

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


_QUOTED_FIELD = re.compile(r'"(?:[^"]+|"")*"')


def uses_standard_quoting(text: str, delimiter: str = "\t") -> bool:
    r"""Whether a delimited text quotes as Python's csv.writer and pandas' to_csv do: it holds a quote, and every
    quote belongs to a field that starts and ends with one, its inner quotes doubled ("a ""b""\tc").

    A bare quote inside a field (GLUE's TSVs: `He said "yes`) or text after a closing quote makes it False:
    such a file is read without quoting.

    >>> uses_standard_quoting('text\tlabel\n"He said ""hi"" twice"\tpos\n')
    True
    >>> uses_standard_quoting('text\tlabel\nHe said "hi"\tpos\n'), uses_standard_quoting('a\tb\n')
    (False, False)
    """
    if '"' not in text:
        return False
    plain = re.compile(f'[^"{re.escape(delimiter)}\r\n]*')
    position, quoted = 0, False
    while position < len(text):
        match = _QUOTED_FIELD.match(text, position)
        quoted = quoted or match is not None
        position = (match or plain.match(text, position)).end()
        if text.startswith("\r\n", position):
            position += 2
        elif text.startswith((delimiter, "\n"), position):
            position += 1
        elif position < len(text):
            return False  # a quote inside a field, or text after a closing quote
    return quoted


def read_delimited(path: str, delimiter: str, quoting: Optional[int] = csv.QUOTE_MINIMAL
                   ) -> Iterator[Tuple[int, List[str]]]:
    """Yields (line number, fields) of a CSV/TSV file (UTF-8, a BOM is dropped).

    Args:
        path: the file (anything tf.io.gfile opens).
        delimiter: "," or "\\t".
        quoting: csv.QUOTE_MINIMAL for CSV; csv.QUOTE_NONE for TSV (GLUE's
            files have unbalanced quotes inside fields); None: QUOTE_MINIMAL
            when the file quotes as csv.writer does (`uses_standard_quoting`),
            else QUOTE_NONE. The line of a record is its last line.

    Raises:
        FileNotFoundError: naming the file.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"Data file not found: {path!r}")
    _raise_csv_field_limit()
    with tf.io.gfile.GFile(path, "rb") as f:
        text = f.read().decode("utf-8-sig")
    if quoting is None:
        quoting = csv.QUOTE_MINIMAL if uses_standard_quoting(text, delimiter) else csv.QUOTE_NONE
        if quoting == csv.QUOTE_MINIMAL:
            logging.info("%s: fields quoted as csv.writer and pandas quote them; read with that quoting.", path)
    kwargs = {"quotechar": None} if quoting == csv.QUOTE_NONE else {}
    # newline="": only \n / \r\n end a record (not U+2028 inside a text).
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting,
                        **kwargs)
    for fields in reader:
        yield reader.line_num, fields


def encode_labels(examples: Sequence[TextExample], label_names: Sequence[str],
                  regression: bool = False, label_set: str = "the label set") -> np.ndarray:
    """Label ids (int32) or regression targets (float32) of labelled examples.

    Args:
        examples: the examples; every one must have a label.
        label_names: the label list; a label's id is its index.
        regression: labels are floats (label_names is ignored).
        label_set: what `label_names` is, in the error message (e.g. "the model's labels").

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
                             f"not one of {label_set} {list(label_names)!r}.")
        ids.append(index[example.label])
    return np.asarray(ids, dtype=np.int32)


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


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float64 (class probabilities, SQuAD n-best probabilities).

    Example:
    >>> softmax(np.array([[0.0, 0.0], [np.log(3.0), 0.0]])).round(3).tolist()
    [[0.5, 0.5], [0.75, 0.25]]
    """
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def split_file(data_dir: str, *names: str) -> Optional[str]:
    """The first of `names` that exists in data_dir (local or any tf.io.gfile path), else None.

    >>> split_file("no-such-folder", "dev.json", "dev-v2.0.json") is None
    True
    """
    for name in names:
        path = os.path.join(data_dir, name)
        if tf.io.gfile.exists(path):
            return path
    return None


# ------------------------------------------------------- length buckets
# Batches per sorting window: large enough that each batch holds examples of
# nearly one length, small enough that which examples share a window (and so
# a batch) changes from pass to pass.
DEFAULT_BATCHES_PER_WINDOW = 50


def pass_batch_sizes(num_examples: int, batch_size: int, drop_remainder: bool = False) -> List[int]:
    """Sizes of the ceil(n / batch_size) batches of one pass, as equal as they can be.

    No batch is larger than batch_size, and none is much smaller (a lone
    remainder batch of one example would leave replicas of a distribution
    strategy without rows). With `drop_remainder` (static shapes): the
    floor(n / batch_size) full batches; the n mod batch_size items left over
    sit out the pass.

    Example:
    >>> pass_batch_sizes(70, 8)
    [8, 8, 8, 8, 8, 8, 8, 7, 7]
    >>> pass_batch_sizes(70, 8, drop_remainder=True)
    [8, 8, 8, 8, 8, 8, 8, 8]
    """
    if drop_remainder:
        if int(num_examples) < int(batch_size):
            raise ValueError(f"Dropping the remainder leaves no batch: {num_examples} items make no full "
                             f"batch of {batch_size}.")
        return [int(batch_size)] * (int(num_examples) // int(batch_size))
    count = -(-int(num_examples) // int(batch_size))
    quotient, remainder = divmod(int(num_examples), count)
    return [quotient + 1] * remainder + [quotient] * (count - remainder)


def group_by_length(order: Sequence[int], lengths: Sequence[int], batch_size: int,
                    batches_per_window: int, drop_remainder: bool = False) -> List[np.ndarray]:
    """Cuts `order` into batches of examples of similar length.

    The batch sizes are `pass_batch_sizes(len(order), batch_size,
    drop_remainder)`; `order` is taken `batches_per_window` batches at a
    time, each window sorted by length (stably, so equal lengths keep their
    order) and cut into its batches. Every index of `order` is in exactly one
    batch (with `drop_remainder`: but the last len(order) mod batch_size).

    Args:
        order: example indices, already shuffled.
        lengths: tokens of every example (indexed by example id).
        batch_size: the largest batch.
        batches_per_window: batches sorted together.
        drop_remainder: full batches only.

    Example:
    >>> [b.tolist() for b in group_by_length([0, 1, 2, 3, 4, 5], [5, 1, 4, 2, 6, 3], 2, 2)]
    [[1, 3], [2, 0], [5, 4]]
    >>> [b.tolist() for b in group_by_length([0, 1, 2, 3, 4], [5, 1, 4, 2, 6], 2, 2, drop_remainder=True)]
    [[1, 3], [2, 0]]
    """
    if batch_size < 1 or batches_per_window < 1:
        raise ValueError(f"group_by_length: batch_size {batch_size!r} and batches_per_window "
                         f"{batches_per_window!r} must be positive.")
    order = np.asarray(order, dtype=np.int64)
    lengths = np.asarray(lengths)
    sizes = pass_batch_sizes(len(order), batch_size, drop_remainder) if len(order) else []
    batches, start = [], 0
    for first in range(0, len(sizes), batches_per_window):
        window_sizes = sizes[first:first + batches_per_window]
        chunk = order[start:start + sum(window_sizes)]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        bounds = np.cumsum([0] + window_sizes)
        batches.extend(chunk[a:b] for a, b in zip(bounds[:-1], bounds[1:]))
        start += sum(window_sizes)
    return batches


def length_bucketed_pass(lengths: Sequence[int], batch_size: int, seed: int, pass_index: int,
                         batches_per_window: int = DEFAULT_BATCHES_PER_WINDOW,
                         drop_remainder: bool = False) -> List[np.ndarray]:
    """One pass over the examples in batches of similar length, in random order.

    The examples are shuffled, grouped by `group_by_length`, and the batches
    shuffled again, so training stays random while a batch pads only to
    lengths close to its own. The same (seed, pass_index) gives the same
    batches; each example is in exactly one batch of a pass (with
    `drop_remainder`, all but len(lengths) mod batch_size of them, chosen
    afresh by each pass's shuffle).

    Args:
        lengths: tokens of every example.
        batch_size: the largest batch (`pass_batch_sizes`: equal sizes up to one).
        seed: the run's seed.
        pass_index: which pass over the data (0, 1, ...).
        batches_per_window: batches sorted together.
        drop_remainder: full batches only (`pass_batch_sizes`).

    Example:
    >>> batches = length_bucketed_pass([9, 1, 8, 2, 7, 3], 2, seed=0, pass_index=0)
    >>> sorted(int(i) for b in batches for i in b)
    [0, 1, 2, 3, 4, 5]
    >>> sorted(sorted([9, 1, 8, 2, 7, 3][i] for i in b) for b in batches)
    [[1, 2], [3, 7], [8, 9]]
    """
    if batches_per_window < 1:
        raise ValueError(f"batches_per_window must be >= 1, got {batches_per_window!r}.")
    rng = np.random.default_rng([int(seed), int(pass_index)])
    order = rng.permutation(len(lengths))
    batches = group_by_length(order, lengths, batch_size, batches_per_window, drop_remainder)
    return [batches[i] for i in rng.permutation(len(batches))]


def shuffled_pass(num_items: int, batch_size: int, seed: int, pass_index: int,
                  drop_remainder: bool = False) -> List[np.ndarray]:
    """One pass over `num_items` items in random order, cut into `pass_batch_sizes` batches.

    The order depends only on (seed, pass_index), so a resumed run can start
    at any batch of any pass and see what an uninterrupted run sees. With
    `drop_remainder` the pass holds full batches only: the last
    num_items mod batch_size items of its order sit it out.

    Example:
    >>> [b.tolist() for b in shuffled_pass(5, 2, seed=0, pass_index=0)]
    [[2, 4], [3, 0], [1]]
    >>> [b.tolist() for b in shuffled_pass(5, 2, seed=0, pass_index=0, drop_remainder=True)]
    [[2, 4], [3, 0]]
    >>> sorted(int(i) for b in shuffled_pass(5, 2, seed=0, pass_index=1) for i in b)
    [0, 1, 2, 3, 4]
    """
    if num_items < 1 or batch_size < 1:
        raise ValueError(f"shuffled_pass: num_items {num_items!r} and batch_size {batch_size!r} must be positive.")
    order = np.random.default_rng([int(seed), int(pass_index)]).permutation(int(num_items))
    bounds = np.cumsum([0] + pass_batch_sizes(num_items, batch_size, drop_remainder))
    return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def batches_per_pass(num_items: int, batch_size: int, drop_remainder: bool = False) -> int:
    """Batches in one pass of `shuffled_pass` / `length_bucketed_pass`: ceil(n / batch_size)
    (floor with `drop_remainder`).

    >>> batches_per_pass(70, 8), batches_per_pass(70, 8, drop_remainder=True)
    (9, 8)
    """
    return len(pass_batch_sizes(num_items, batch_size, drop_remainder))


def passes_dataset(columns, pass_batches: Callable[[int], Sequence[np.ndarray]], num_items: int,
                   batch_size: int, start_batch: int = 0, drop_remainder: bool = False) -> tf.data.Dataset:
    """Batches of `columns`, pass after pass, forever, from batch `start_batch` of the stream.

    Batch k of the stream is batch k mod B of pass k div B (B =
    `batches_per_pass`), so starting at `start_batch` gives exactly the
    batches a run from 0 would see from there on: resuming skips no example
    and repeats none.

    Args:
        columns: a tensor, or a nested structure of tensors/arrays, one row per item.
        pass_batches: pass index -> its batches of item indices (each pass
            holds `batches_per_pass(num_items, batch_size, drop_remainder)` batches).
        num_items: rows of `columns`.
        batch_size: the largest batch.
        start_batch: batches already consumed.
        drop_remainder: the passes hold full batches only; the dataset's
            batch dimension is then batch_size, not None.

    Example:
    >>> ds = passes_dataset(tf.constant([10, 11, 12]), lambda p: shuffled_pass(3, 2, 0, p), 3, 2,
    ...                     start_batch=1)
    >>> [b.tolist() for b in ds.take(2).as_numpy_iterator()]  # pass 0 batch 1, pass 1 batch 0
    [[11], [12, 10]]
    """
    columns = tf.nest.map_structure(tf.convert_to_tensor, columns)
    for column in tf.nest.flatten(columns):
        if int(column.shape[0]) != num_items:
            raise ValueError(f"passes_dataset: a column has {column.shape[0]} rows but there are "
                             f"{num_items} items.")
    per_pass = batches_per_pass(num_items, batch_size, drop_remainder)
    first_pass, first_batch = divmod(int(start_batch), per_pass)

    def batches():
        pass_index, skip = first_pass, first_batch
        while True:
            chosen = list(pass_batches(pass_index))
            if len(chosen) != per_pass:
                raise ValueError(f"passes_dataset: pass {pass_index} has {len(chosen)} batches, "
                                 f"expected {per_pass}.")
            yield from chosen[skip:]
            pass_index, skip = pass_index + 1, 0

    rows = int(batch_size) if drop_remainder else None
    indices = tf.data.Dataset.from_generator(batches, output_signature=tf.TensorSpec([rows], tf.int64))
    return indices.map(lambda idx: tf.nest.map_structure(lambda c: tf.gather(c, idx), columns),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def length_bucketed_dataset(columns, lengths: Sequence[int], batch_size: int, seed: int,
                            batches_per_window: int = DEFAULT_BATCHES_PER_WINDOW,
                            start_batch: int = 0) -> tf.data.Dataset:
    """Batches of `columns` in length buckets, pass after pass, forever.

    Each batch pads only to its own longest example (the task models'
    preprocessors pad to the batch's longest), so little is computed on
    padding; batches of a pass come in random order (`length_bucketed_pass`).

    Args:
        columns: a tensor, or a nested structure of tensors (strings, labels),
            with one row per example.
        lengths: tokens of every example (its packed length).
        batch_size: examples per batch.
        seed: fixes every pass's batches and order.
        batches_per_window: batches sorted together.
        start_batch: batches already consumed (`passes_dataset`).

    Returns:
        A dataset of `columns` batches (batch dimension None: when batch_size
        does not divide the examples, some batches hold one example less).

    Example:
    >>> ds = length_bucketed_dataset(tf.constant(["a b c", "a", "a b"]), [3, 1, 2], 2, seed=0)
    >>> sorted(len(b) for b in ds.take(2).as_numpy_iterator())  # one pass: 3 examples
    [1, 2]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or not len(lengths):
        raise ValueError(f"length_bucketed_dataset: lengths must be a non-empty list, got shape {lengths.shape}.")
    for column in tf.nest.flatten(columns):
        if int(column.shape[0]) != len(lengths):
            raise ValueError(f"length_bucketed_dataset: a column has {column.shape[0]} rows but there are "
                             f"{len(lengths)} lengths.")
    return passes_dataset(
        columns, lambda p: length_bucketed_pass(lengths, batch_size, seed, p, batches_per_window),
        len(lengths), batch_size, start_batch)
