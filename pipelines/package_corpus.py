"""A larger real corpus on every machine with albert-tf installed: package docstrings.

TensorFlow, Keras, NumPy and the other packages albert-tf depends on carry tens
of MB of Python source with English docstrings. As `pipelines.stdlib_corpus`
does for the standard library, every module of these packages is parsed with
`ast` (never imported) and becomes one document: its docstrings in source
order, code and tables dropped, one sentence per line.

Held-out evaluation text comes from whole *packages* (a folder of modules,
e.g. ``numpy/linalg``): every module of a held-out folder goes to eval.txt.
Packages copy docstrings between each other (generated API files, vendored
code), so a sentence is kept only at its first occurrence in the sorted walk:
no sentence is in both files, and training text has no repeats.

Example:

>>> info = write_package_corpus("corpus_dir")   # doctest: +SKIP
>>> info["train_sentences"] > 100000              # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from pipelines import fileio
from pipelines.stdlib_corpus import module_sentences

# albert-tf's requirements and theirs (setup.py install_requires): present
# wherever the project is installed. Missing ones are skipped (and counted).
DEFAULT_PACKAGES = (
    "tensorflow", "keras", "numpy", "absl", "tensorflow_text", "google.protobuf",
    "h5py", "ml_dtypes", "optree", "rich", "markdown_it", "pygments", "requests",
    "urllib3", "wrapt", "gast", "opt_einsum", "packaging", "namex", "termcolor",
    "flatbuffers", "astunparse",
)
# Folders of tests, examples and build files rather than documented library code.
_SKIP_DIRS = {"test", "tests", "testing", "_testing", "__pycache__", "examples", "include", "benchmarks"}
MIN_DOCUMENT_SENTENCES = 2
_FENCE = re.compile(r"^\s*(```|~~~)")


def strip_fenced_code(docstring: str) -> str:
    r"""The docstring without Markdown fenced code blocks (```...```), which Keras uses.

    Example:

    >>> strip_fenced_code("Adds.\n```python\nx = 1\n```\nDone.")
    'Adds.\n\nDone.'
    """
    lines, inside = [], False
    for line in docstring.splitlines():
        if _FENCE.match(line):
            if not inside:
                lines.append("")  # a paragraph break where the block was
            inside = not inside
        elif not inside:
            lines.append(line)
    return "\n".join(lines)


def module_docstring_sentences(path: str) -> List[str]:
    """Prose sentences of a source file's docstrings, in source order (never imported)."""
    return module_sentences(path, clean=strip_fenced_code)


def package_root(name: str) -> Optional[str]:
    """The folder of an installed package (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return sorted(spec.submodule_search_locations)[0]


def iter_package_documents(packages: Sequence[str] = DEFAULT_PACKAGES,
                           roots: Optional[Dict[str, str]] = None) -> Iterator[Tuple[str, str, List[str]]]:
    """Yields (package folder, module path, sentences) for each documented module, sorted.

    Args:
        packages: importable package names (dotted for namespace parts, e.g.
            "google.protobuf").
        roots: package name -> folder, overriding the installed location
            (tests use small fake packages).

    The package folder (the held-out unit) is the module's folder relative
    to the package's parent, e.g. "numpy/linalg".
    """
    for name in packages:
        root = (roots or {}).get(name) or package_root(name)
        if root is None:
            continue
        base = os.path.dirname(root)
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith((".", "test_")))
            for file_name in sorted(files):
                if not file_name.endswith(".py") or file_name.startswith("test_") or file_name.endswith("_test.py"):
                    continue
                path = os.path.join(folder, file_name)
                sentences = module_docstring_sentences(path)
                if len(sentences) >= MIN_DOCUMENT_SENTENCES:
                    yield os.path.relpath(folder, base), os.path.relpath(path, base), sentences


def _unique_documents(documents, counts) -> List[Tuple[str, List[str]]]:
    """(unit, sentences) with every sentence kept at its first occurrence only."""
    seen, out = set(), []
    for unit, _, sentences in documents:
        fresh = []
        for sentence in sentences:
            digest = hashlib.blake2b(sentence.encode(), digest_size=12).digest()
            if digest in seen:
                counts["duplicate_sentences"] += 1
                continue
            seen.add(digest)
            fresh.append(sentence)
        if len(fresh) >= MIN_DOCUMENT_SENTENCES:
            out.append((unit, fresh))
    return out


def heldout_units(documents: Sequence[Tuple[str, List[str]]], fraction: float, seed: int) -> set:
    """Package folders to hold out: in seeded-hash order, while they fit in `fraction` of the sentences.

    A plain hash threshold would hold out a random share of the *text*
    (one folder, tensorflow/python/ops, holds a quarter of it); filling a
    budget keeps the share near `fraction` for any seed.

    Example:

    >>> docs = [("a", ["x"] * 50), ("b", ["x"] * 30), ("c", ["x"] * 10), ("d", ["x"] * 10)]
    >>> held = heldout_units(docs, 0.2, seed=0)
    >>> sum(len(s) for u, s in docs if u in held) <= 20 and len(held) >= 1
    True
    """
    sizes: Dict[str, int] = {}
    for unit, sentences in documents:
        sizes[unit] = sizes.get(unit, 0) + len(sentences)
    budget = fraction * sum(sizes.values())
    order = sorted(sizes, key=lambda u: hashlib.sha256(f"{seed}:{u}".encode()).digest())
    held, used = set(), 0
    for unit in order:
        if used + sizes[unit] <= budget:
            held.add(unit)
            used += sizes[unit]
    return held


def write_package_corpus(output_dir: str, heldout_fraction: float = 0.1, seed: int = 12345,
                         packages: Sequence[str] = DEFAULT_PACKAGES,
                         roots: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """Writes train.txt and eval.txt (held-out packages) in the pretraining format.

    Args:
        output_dir: folder for the two files (created if needed).
        heldout_fraction: share of package folders kept out of training.
        seed: decides which package folders are held out.
        packages: the packages to read (default: albert-tf's dependencies).
        roots: package name -> folder overrides (see `iter_package_documents`).

    Returns:
        dict with train_file, eval_file, document/sentence counts,
        duplicate_sentences (dropped) and packages_found.

    Raises:
        ValueError: no package found, or a split came out empty.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction!r}.")
    fileio.makedirs(output_dir)
    paths = {"train": os.path.join(output_dir, "train.txt"), "eval": os.path.join(output_dir, "eval.txt")}
    counts: Dict[str, object] = {"train_documents": 0, "eval_documents": 0, "train_sentences": 0,
                                 "eval_sentences": 0, "duplicate_sentences": 0}
    found = [p for p in packages if (roots or {}).get(p) or package_root(p)]
    if not found:
        raise ValueError(f"None of the packages {list(packages)} is installed.")
    documents = _unique_documents(iter_package_documents(found, roots), counts)
    heldout = heldout_units(documents, heldout_fraction, seed)
    with contextlib.ExitStack() as stack:
        handles = {split: stack.enter_context(fileio.atomic_write(path)) for split, path in paths.items()}
        for unit, sentences in documents:
            split = "eval" if unit in heldout else "train"
            handles[split].write("\n".join(sentences) + "\n\n")
            counts[f"{split}_documents"] += 1
            counts[f"{split}_sentences"] += len(sentences)
        if counts["train_documents"] == 0 or counts["eval_documents"] == 0:
            raise ValueError(f"The packages {found} gave too few documents to hold some out: {counts}.")
    return {"train_file": paths["train"], "eval_file": paths["eval"], "packages_found": found, **counts}
