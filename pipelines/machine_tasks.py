"""Labelled tasks from any collection of documents (the text already on a machine).

A document is `(key, sentences)`: a module of the standard library
(`pipelines.stdlib_corpus.iter_stdlib_documents`) or of an installed package
(`pipelines.package_corpus.iter_package_documents`), or any text cut into
sentences. The builders below know nothing about the corpus, so the same task
can be built from any text:

* `same_document_pairs`: sentence-pair classification. Are A and B two
  sentences of one document ("same") or of two different documents
  ("different")? Exactly half of each split is "same".
* `relative_position`: single-sentence regression. Where in its document does
  the sentence stand: index / (sentences - 1), from 0.0 (first) to 1.0 (last)?

Whole documents are held out for dev (a seeded hash decides, `split_documents`),
and a dev example whose text also occurs in train is dropped, so dev measures
what a model learned about text it has not seen. Every random choice takes the
`seed` argument: the same documents and seed give the same files.

`write_task` writes `train.jsonl` / `dev.jsonl` (columns `text`, optionally
`text_b`, and `label`) as albert-finetune's `--task=csv` reads them
(`pipelines.finetune.tabular`).

Example:

>>> docs = [(f"doc{i}", [f"Sentence {j} of document {i}." for j in range(6)]) for i in range(20)]
>>> task = same_document_pairs(docs, dev_fraction=0.25, seed=1)
>>> sorted(task), sorted({label for _, _, label in task["train"]})
(['dev', 'train'], ['different', 'same'])
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import random
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from pipelines.fileio import atomic_write, makedirs, read_text

Document = Tuple[str, List[str]]
SAME, DIFFERENT = "same", "different"


def _hash_fraction(key: str, seed: int) -> float:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def split_documents(documents: Iterable[Document], dev_fraction: float,
                    seed: int) -> Dict[str, List[Document]]:
    """Documents into {"train": [...], "dev": [...]} by a seeded hash of their keys.

    Args:
        documents: (key, sentences) pairs; keys must be unique.
        dev_fraction: the expected share of documents held out for dev.
        seed: decides which documents are held out.

    Raises:
        ValueError: dev_fraction outside (0, 1), a repeated key, or a split
            that comes out empty.

    Example:
    >>> docs = [(str(i), ["x."]) for i in range(100)]
    >>> parts = split_documents(docs, 0.2, seed=0)
    >>> len(parts["train"]) + len(parts["dev"]), 10 <= len(parts["dev"]) <= 30
    (100, True)
    """
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction!r}.")
    parts: Dict[str, List[Document]] = {"train": [], "dev": []}
    seen = set()
    for key, sentences in documents:
        if key in seen:
            raise ValueError(f"Document key {key!r} occurs twice.")
        seen.add(key)
        parts["dev" if _hash_fraction(key, seed) < dev_fraction else "train"].append((key, list(sentences)))
    if not parts["train"] or not parts["dev"]:
        raise ValueError(f"Splitting {len(seen)} documents at dev_fraction={dev_fraction!r} left a split empty; "
                         "give more documents or another seed.")
    return parts


def _drop_seen(train: Sequence[tuple], dev: Sequence[tuple], width: int) -> List[tuple]:
    """Dev rows whose text columns (the first `width` fields) do not occur in train."""
    seen = {row[:width] for row in train}
    return [row for row in dev if row[:width] not in seen]


def _pairs_of_split(documents: Sequence[Document], rng: random.Random) -> List[Tuple[str, str, str]]:
    """One "same" and one "different" pair per eligible sentence, in a seeded order.

    "same": A and another sentence of A's document (not A itself).
    "different": A and a sentence of another document of the split.
    """
    usable = [(key, sentences) for key, sentences in documents if len(sentences) >= 2]
    if len(usable) < 2:
        raise ValueError(f"Sentence pairs need at least two documents of 2+ sentences, got {len(usable)}.")
    pairs = []
    for index, (_, sentences) in enumerate(usable):
        for i, sentence in enumerate(sentences):
            j = rng.randrange(len(sentences) - 1)
            pairs.append((sentence, sentences[j + (j >= i)], SAME))
            other = rng.randrange(len(usable) - 1)
            other_sentences = usable[other + (other >= index)][1]
            pairs.append((sentence, other_sentences[rng.randrange(len(other_sentences))], DIFFERENT))
    return pairs


def _balanced_sample(rows: Sequence[Tuple[str, str, str]], limit: Optional[int],
                     rng: random.Random) -> List[Tuple[str, str, str]]:
    """Equally many "same" and "different" rows (at most limit, even), shuffled."""
    by_label = {SAME: [r for r in rows if r[2] == SAME], DIFFERENT: [r for r in rows if r[2] == DIFFERENT]}
    per_label = min(len(v) for v in by_label.values())
    if limit is not None:
        per_label = min(per_label, limit // 2)
    out = [row for label in (SAME, DIFFERENT) for row in rng.sample(by_label[label], per_label)]
    rng.shuffle(out)
    return out


def same_document_pairs(documents: Iterable[Document], *, dev_fraction: float = 0.2, seed: int = 12345,
                        max_train_examples: Optional[int] = None,
                        max_dev_examples: Optional[int] = None) -> Dict[str, List[Tuple[str, str, str]]]:
    """Sentence-pair task: (text, text_b, "same" | "different") rows per split.

    Args:
        documents: (key, sentences) pairs.
        dev_fraction: share of documents held out for dev.
        seed: decides the held-out documents, the partners and the subsample.
        max_train_examples / max_dev_examples: keep at most this many rows
            per split, still exactly balanced.

    Returns:
        {"train": rows, "dev": rows}; each split half "same", half "different".
    """
    parts = split_documents(documents, dev_fraction, seed)
    rng = random.Random(seed)
    train = _pairs_of_split(parts["train"], rng)
    dev = _drop_seen(train, _pairs_of_split(parts["dev"], rng), 2)
    return {"train": _balanced_sample(train, max_train_examples, rng),
            "dev": _balanced_sample(dev, max_dev_examples, rng)}


def _positions_of_split(documents: Sequence[Document], min_sentences: int) -> List[Tuple[str, float]]:
    rows = []
    for _, sentences in documents:
        if len(sentences) >= min_sentences:
            last = len(sentences) - 1
            rows.extend((sentence, round(i / last, 6)) for i, sentence in enumerate(sentences))
    return rows


def relative_position(documents: Iterable[Document], *, min_sentences: int = 5, dev_fraction: float = 0.2,
                      seed: int = 12345, max_train_examples: Optional[int] = None,
                      max_dev_examples: Optional[int] = None) -> Dict[str, List[Tuple[str, float]]]:
    """Regression task: (sentence, index / (sentences - 1)) rows per split.

    Args:
        documents: (key, sentences) pairs; documents of fewer than
            `min_sentences` sentences are left out (a position in a two-line
            document says little).
        min_sentences: see above (at least 2).
        dev_fraction: share of documents held out for dev.
        seed: decides the held-out documents and the subsample.
        max_train_examples / max_dev_examples: keep a seeded random subset.

    Returns:
        {"train": rows, "dev": rows}, labels in [0, 1], rows shuffled.

    Example:
    >>> docs = [(f"d{i}", [f"Line {j} of {i}." for j in range(5)]) for i in range(10)]
    >>> task = relative_position(docs, dev_fraction=0.3, seed=0)
    >>> sorted({label for _, label in task["train"]})
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if min_sentences < 2:
        raise ValueError(f"min_sentences must be at least 2, got {min_sentences!r}.")
    parts = split_documents(documents, dev_fraction, seed)
    rng = random.Random(seed)
    out = {}
    train = _positions_of_split(parts["train"], min_sentences)
    dev = _drop_seen(train, _positions_of_split(parts["dev"], min_sentences), 1)
    for split, rows, limit in (("train", train, max_train_examples), ("dev", dev, max_dev_examples)):
        if not rows:
            raise ValueError(f"No {split} document has {min_sentences}+ sentences.")
        rows = list(rows)
        rng.shuffle(rows)
        out[split] = rows[:limit] if limit is not None else rows
    return out


def write_task(output_dir: str, examples: Dict[str, Sequence[tuple]]) -> Dict[str, object]:
    """Writes each split as `<split>.jsonl` with `text`, (`text_b`,) `label` fields.

    Rows are (text, label) or (text, text_b, label); the label is a string
    (classification) or a number (regression: read with `--regression`).

    Args:
        output_dir: the task folder (albert-finetune's --data_dir).
        examples: split name -> rows.

    Returns:
        dict with per split the file path, the row count and, for string
        labels, the count of each label.

    Example:
    >>> import tempfile
    >>> info = write_task(tempfile.mkdtemp(), {"train": [("a", "x"), ("b", "y")], "dev": [("c", "x")]})
    >>> info["train_examples"], info["dev_labels"]
    (2, {'x': 1})
    """
    makedirs(output_dir)
    summary: Dict[str, object] = {}
    for split, rows in examples.items():
        path = os.path.join(output_dir, f"{split}.jsonl")
        with atomic_write(path, "w") as f:
            for row in rows:
                if len(row) not in (2, 3):
                    raise ValueError(f"A row must be (text, label) or (text, text_b, label), got {row!r}.")
                record = {"text": row[0], "label": row[-1]}
                if len(row) == 3:
                    record["text_b"] = row[1]
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        summary[f"{split}_file"] = path
        summary[f"{split}_examples"] = len(rows)
        if rows and isinstance(rows[0][-1], str):
            summary[f"{split}_labels"] = dict(sorted(collections.Counter(r[-1] for r in rows).items()))
    return summary


def read_task(output_dir: str) -> Dict[str, List[tuple]]:
    """The rows `write_task` wrote, per split (train, dev; test when present).

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_task(folder, {"train": [("a", "b", "same")], "dev": [("c", "d", "different")]})
    >>> read_task(folder)["dev"]
    [('c', 'd', 'different')]
    """
    out: Dict[str, List[tuple]] = {}
    for split in ("train", "dev", "test"):
        path = os.path.join(output_dir, f"{split}.jsonl")
        try:
            text = read_text(path)
        except FileNotFoundError:  # test is optional
            continue
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        out[split] = [(r["text"], r["text_b"], r["label"]) if "text_b" in r else (r["text"], r["label"])
                      for r in records]
    return out
