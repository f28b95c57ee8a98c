"""A labelled task from text already on the machine: which part of the standard library wrote this docstring?

Each example is a short passage (up to `sentences_per_example` consecutive
docstring sentences of one module, taken from `pipelines.stdlib_corpus`), and
its label is the topic group of the module's top-level package, e.g.
`email/message.py` -> "networking", `asyncio/tasks.py` -> "concurrency". Whole
modules are held out for dev (never split between train and dev), chosen per
group by a seeded hash until the group has `dev_fraction` of its passages in
dev, so every group is in both splits and a model cannot pass dev by
recognising a module it saw in training.

The files are written as `--task=csv` reads them: `train.csv` and `dev.csv`
with a `text,label` header.
"""

from __future__ import annotations

import collections
import csv
import hashlib
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from pipelines.fileio import atomic_write
from pipelines.stdlib_corpus import iter_stdlib_documents

# Top-level package or module -> topic group. Chosen so that every group has
# several hundred sentences in CPython 3.11 and several modules (so that some
# can be held out); modules not listed are not used.
TOPIC_GROUPS: Dict[str, Tuple[str, ...]] = {
    "networking": ("http", "urllib", "email", "smtplib", "imaplib", "ftplib", "nntplib", "poplib",
                   "socketserver", "socket", "ssl", "xmlrpc", "wsgiref", "mailbox", "mimetypes",
                   "ipaddress", "webbrowser", "smtpd", "telnetlib", "cgi", "uu", "quopri", "base64"),
    "concurrency": ("asyncio", "multiprocessing", "concurrent", "threading", "subprocess", "queue",
                    "sched", "selectors", "signal", "_threading_local", "asyncore", "asynchat"),
    "files": ("os", "shutil", "pathlib", "tarfile", "zipfile", "glob", "fnmatch", "tempfile", "_pyio",
              "filecmp", "gzip", "bz2", "lzma", "fileinput", "stat", "posixpath", "ntpath",
              "genericpath", "shelve", "dbm", "pickle", "copyreg", "zipimport", "netrc", "chunk",
              "wave", "aifc", "sunau", "plistlib"),
    "text": ("xml", "html", "json", "re", "string", "textwrap", "difflib", "codecs", "encodings",
             "csv", "configparser", "gettext", "locale", "sre_parse", "sre_compile", "stringprep",
             "tomllib", "shlex", "pprint", "reprlib"),
    "development": ("unittest", "doctest", "pdb", "bdb", "pydoc", "inspect", "ast", "dis", "trace",
                    "profile", "cProfile", "pstats", "timeit", "typing", "importlib", "pkgutil",
                    "tokenize", "traceback", "warnings", "code", "codeop", "modulefinder",
                    "pyclbr", "tabnanny", "py_compile", "compileall", "symtable", "linecache",
                    "runpy", "site", "sysconfig", "venv", "zipapp", "distutils", "abc", "functools",
                    "contextlib", "dataclasses", "enum", "types", "weakref", "copy", "operator"),
    "numbers_and_time": ("_pydecimal", "fractions", "statistics", "random", "datetime", "calendar",
                         "numbers", "_strptime", "colorsys", "heapq", "bisect", "hashlib", "hmac",
                         "secrets", "uuid"),
    "gui": ("tkinter", "turtle"),
}


def topic_of(module_path: str, groups: Dict[str, Sequence[str]] = TOPIC_GROUPS) -> Optional[str]:
    """The topic group of a standard-library file, or None when it is in no group.

    Args:
        module_path: path relative to the standard library folder.
        groups: topic -> top-level package or module names.

    Example:
    >>> topic_of("email/mime/text.py"), topic_of("asyncio/tasks.py"), topic_of("antigravity.py")
    ('networking', 'concurrency', None)
    """
    top = module_path.replace("\\", "/").split("/")[0]
    if top.endswith(".py"):
        top = top[: -len(".py")]
    for topic, names in groups.items():
        if top in names:
            return topic
    return None


def passages(sentences: Sequence[str], sentences_per_example: int) -> List[str]:
    """Consecutive, non-overlapping runs of sentences joined by a space.

    Example:
    >>> passages(["A b.", "C d.", "E f."], 2)
    ['A b. C d.', 'E f.']
    """
    if sentences_per_example < 1:
        raise ValueError(f"sentences_per_example must be >= 1, got {sentences_per_example!r}.")
    return [" ".join(sentences[i:i + sentences_per_example])
            for i in range(0, len(sentences), sentences_per_example)]


def _hash(key: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:8], "big")


def split_modules(modules: Dict[str, Tuple[str, List[str]]], dev_fraction: float,
                  seed: int) -> Dict[str, str]:
    """Module -> "train" or "dev": per topic, modules in hash order go to dev until it holds dev_fraction.

    A topic with a single module keeps it in train. The largest module of a
    topic never goes to dev when that would leave train with less than half
    of the topic's passages.

    Args:
        modules: module path -> (topic, passages).
        dev_fraction: the share of each topic's passages to hold out.
        seed: decides the hash order.

    Example:
    >>> mods = {"a.py": ("t", ["x"] * 5), "b.py": ("t", ["y"] * 5), "c.py": ("t", ["z"] * 10)}
    >>> sorted(split_modules(mods, 0.25, seed=0).values())
    ['dev', 'train', 'train']
    """
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"dev_fraction must be in (0, 1), got {dev_fraction!r}.")
    by_topic: Dict[str, List[str]] = collections.defaultdict(list)
    for key, (topic, _) in modules.items():
        by_topic[topic].append(key)
    split = {key: "train" for key in modules}
    for topic, keys in by_topic.items():
        total = sum(len(modules[k][1]) for k in keys)
        held = 0
        for key in sorted(keys, key=lambda k: _hash(k, seed)):
            if len(keys) < 2 or held >= dev_fraction * total:
                break
            size = len(modules[key][1])
            if held + size > 0.5 * total:
                continue
            split[key] = "dev"
            held += size
    return split


def build_stdlib_topic_task(
    stdlib_dir: Optional[str] = None,
    *,
    sentences_per_example: int = 2,
    dev_fraction: float = 0.2,
    seed: int = 12345,
    groups: Dict[str, Sequence[str]] = TOPIC_GROUPS,
    documents: Optional[Iterable[Tuple[str, List[str]]]] = None,
) -> Dict[str, List[Tuple[str, str]]]:
    """The examples of the topic task: {"train": [(text, label), ...], "dev": [...]}.

    Args:
        stdlib_dir: the standard library folder (default: this interpreter's).
        sentences_per_example: docstring sentences per passage.
        dev_fraction: share of each topic's passages in held-out modules.
        seed: decides which modules are held out.
        groups: topic -> top-level package or module names.
        documents: (module path, sentences) pairs instead of reading the
            standard library (for tests).

    Returns:
        The two splits, in module order.
    """
    modules: Dict[str, Tuple[str, List[str]]] = {}
    for key, sentences in (documents if documents is not None else iter_stdlib_documents(stdlib_dir)):
        topic = topic_of(key, groups)
        if topic is not None:
            modules[key] = (topic, passages(sentences, sentences_per_example))
    if not modules:
        raise ValueError(f"No module of the standard library at {stdlib_dir or 'default'} is in a topic group.")
    split = split_modules(modules, dev_fraction, seed)
    examples: Dict[str, List[Tuple[str, str]]] = {"train": [], "dev": []}
    for key in sorted(modules):
        topic, texts = modules[key]
        examples[split[key]].extend((text, topic) for text in texts)
    return examples


def subsample(rows: Sequence, limit: Optional[int], seed: int) -> List:
    """At most `limit` rows, a seeded random choice kept in the original order.

    Example:
    >>> subsample(list(range(10)), 3, seed=1) == sorted(subsample(list(range(10)), 3, seed=1))
    True
    >>> subsample([1, 2], None, seed=0)
    [1, 2]
    """
    if limit is None or limit >= len(rows):
        return list(rows)
    import random

    keep = sorted(random.Random(seed).sample(range(len(rows)), limit))
    return [rows[i] for i in keep]


def write_stdlib_topic_task(output_dir: str, *, max_train_examples: Optional[int] = None,
                            max_dev_examples: Optional[int] = None, **kwargs) -> Dict[str, object]:
    """Writes train.csv and dev.csv (header `text,label`) for `--task=csv`.

    Args:
        output_dir: folder for the two files (created if needed).
        max_train_examples / max_dev_examples: keep a seeded random subset
            (to fit a time budget).
        **kwargs: passed to `build_stdlib_topic_task`.

    Returns:
        dict with the file paths, example counts and the label counts per split.
    """
    import os

    from pipelines.fileio import makedirs

    makedirs(output_dir)
    examples = build_stdlib_topic_task(**kwargs)
    seed = kwargs.get("seed", 12345)
    examples["train"] = subsample(examples["train"], max_train_examples, seed)
    examples["dev"] = subsample(examples["dev"], max_dev_examples, seed + 1)
    summary: Dict[str, object] = {}
    for split, rows in examples.items():
        path = os.path.join(output_dir, f"{split}.csv")
        with atomic_write(path, "w") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["text", "label"])
            writer.writerows(rows)
        summary[f"{split}_file"] = path
        summary[f"{split}_examples"] = len(rows)
        summary[f"{split}_labels"] = dict(sorted(collections.Counter(label for _, label in rows).items()))
    return summary


def majority_baseline(train_labels: Sequence[str], dev_labels: Sequence[str]) -> Tuple[str, float]:
    """The most frequent training label and the dev accuracy of always predicting it.

    Example:
    >>> majority_baseline(["a", "a", "b"], ["a", "b", "b", "b"])
    ('a', 0.25)
    """
    if not train_labels or not dev_labels:
        raise ValueError("majority_baseline needs non-empty train and dev labels.")
    label = collections.Counter(train_labels).most_common(1)[0][0]
    return label, sum(y == label for y in dev_labels) / len(dev_labels)


_WORD = re.compile(r"[a-z0-9]+")


def bag_of_words(text: str) -> List[str]:
    """Lower-cased runs of letters and digits: the words a bag-of-words baseline counts.

    Example:
    >>> bag_of_words("Open the FILE; return os.path (v2).")
    ['open', 'the', 'file', 'return', 'os', 'path', 'v2']
    """
    return _WORD.findall(text.lower())


def naive_bayes_baseline(train_texts: Sequence[str], train_labels: Sequence[str], dev_texts: Sequence[str],
                         alpha: float = 1.0) -> List[str]:
    """Multinomial naive Bayes on word counts: the dev predictions of a model with no pretraining.

    Each label scores log P(label) + sum over the text's words of
    log P(word | label), with P(word | label) = (count + alpha) / (total +
    alpha * V) over the training vocabulary V (Laplace smoothing); words not
    seen in training are ignored. Ties go to the label first in sorted order.

    Args:
        train_texts, train_labels: the training split.
        dev_texts: texts to label.
        alpha: additive smoothing (> 0).

    Returns:
        One predicted label per dev text.

    Example:
    >>> naive_bayes_baseline(["open file", "read file", "send mail"], ["files", "files", "net"],
    ...                      ["send file", "mail"])
    ['files', 'net']
    """
    import numpy as np

    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}.")
    if not train_texts or len(train_texts) != len(train_labels):
        raise ValueError(f"naive_bayes_baseline needs as many train texts as labels, got {len(train_texts)} "
                         f"texts and {len(train_labels)} labels.")
    labels = sorted(set(train_labels))
    label_index = {label: i for i, label in enumerate(labels)}
    vocab: Dict[str, int] = {}
    for text in train_texts:
        for word in bag_of_words(text):
            vocab.setdefault(word, len(vocab))
    counts = np.zeros((len(labels), len(vocab)))
    for text, label in zip(train_texts, train_labels):
        for word in bag_of_words(text):
            counts[label_index[label], vocab[word]] += 1
    log_prior = np.log(np.bincount([label_index[y] for y in train_labels], minlength=len(labels)) /
                       len(train_labels))
    log_likelihood = np.log((counts + alpha) / (counts.sum(axis=1, keepdims=True) + alpha * len(vocab)))
    predictions = []
    for text in dev_texts:
        ids = [vocab[w] for w in bag_of_words(text) if w in vocab]
        scores = log_prior + log_likelihood[:, ids].sum(axis=1)
        predictions.append(labels[int(np.argmax(scores))])
    return predictions
