"""The built-in demo corpus: docstrings of the installed Python standard library.

Every Python install carries a few MB of English prose in its docstrings. The
source files are parsed with `ast` (never imported, so nothing runs) and each
module becomes one document: its module, class and function docstrings in
source order, with code examples and parameter tables dropped, split into one
sentence per line. Documents are separated by blank lines, the original
pretraining-data format.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import re
import sysconfig
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from pipelines import fileio

# Folders of the standard library that hold tests, GUIs or vendored packages
# rather than documented library code.
_SKIP_DIRS = {"site-packages", "test", "tests", "idlelib", "__pycache__", "lib2to3", "turtledemo", "ensurepip"}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_MIN_SENTENCE_CHARS = 12


def _looks_like_prose(paragraph: List[str]) -> bool:
    first = paragraph[0]
    if first.startswith((">>>", "...", "$ ", "%", "#", "|", "+-", "==", "--", "::")):
        return False
    if any(line.startswith("    ") for line in paragraph):  # indented blocks: code, tables
        return False
    letters = sum(ch.isalpha() for ch in " ".join(paragraph))
    return letters >= 0.6 * len(" ".join(paragraph))


def docstring_sentences(docstring: str) -> List[str]:
    """Splits a docstring into prose sentences (code, tables and lists dropped)."""
    sentences: List[str] = []
    paragraph: List[str] = []

    def flush():
        if paragraph and _looks_like_prose(paragraph):
            text = " ".join(line.strip() for line in paragraph)
            text = re.sub(r"\s+", " ", text)
            for sentence in _SENTENCE_END.split(text):
                sentence = sentence.strip()
                if len(sentence) >= _MIN_SENTENCE_CHARS:
                    sentences.append(sentence)
        paragraph.clear()

    for line in docstring.splitlines():
        if not line.strip():
            flush()
        else:
            paragraph.append(line.rstrip())
    flush()
    return sentences


def module_sentences(path: str, clean: Optional[Callable[[str], str]] = None) -> List[str]:
    """Sentences of all docstrings of one source file, in source order (never imported).

    Args:
        path: a Python source file.
        clean: applied to each docstring before it is split (e.g. to drop code blocks).
    """
    try:
        tree = ast.parse(fileio.read_text(path), filename=path)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    nodes = [tree] + sorted(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))),
        key=lambda n: n.lineno,
    )
    sentences: List[str] = []
    for node in nodes:
        doc = ast.get_docstring(node)
        if doc:
            sentences.extend(docstring_sentences(clean(doc) if clean else doc))
    return sentences


def iter_stdlib_documents(stdlib_dir: Optional[str] = None) -> Iterator[Tuple[str, List[str]]]:
    """Yields (relative module path, sentences) for each documented stdlib file, sorted."""
    root = stdlib_dir or sysconfig.get_paths()["stdlib"]
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                sentences = module_sentences(path)
                if len(sentences) >= 2:
                    yield os.path.relpath(path, root), sentences


def _is_heldout(key: str, fraction: float, seed: int) -> bool:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def write_stdlib_corpus(
    output_dir: str, heldout_fraction: float = 0.05, seed: int = 12345, stdlib_dir: Optional[str] = None
) -> Dict[str, object]:
    """Writes train.txt and eval.txt (held-out modules) in the pretraining format.

    Args:
        output_dir: folder for the two files (created if needed).
        heldout_fraction: share of modules (documents) kept out of training.
        seed: decides which modules are held out.
        stdlib_dir: the standard library folder (default: this interpreter's).

    Returns:
        dict with train_file, eval_file and document/sentence counts.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction!r}.")
    fileio.makedirs(output_dir)
    paths = {"train": os.path.join(output_dir, "train.txt"), "eval": os.path.join(output_dir, "eval.txt")}
    counts = {"train_documents": 0, "eval_documents": 0, "train_sentences": 0, "eval_sentences": 0}
    # Both files appear together or not at all (a failure removes both temporaries).
    with contextlib.ExitStack() as stack:
        handles = {split: stack.enter_context(fileio.atomic_write(path)) for split, path in paths.items()}
        for key, sentences in iter_stdlib_documents(stdlib_dir):
            split = "eval" if _is_heldout(key, heldout_fraction, seed) else "train"
            handles[split].write("\n".join(sentences) + "\n\n")
            counts[f"{split}_documents"] += 1
            counts[f"{split}_sentences"] += len(sentences)
        if counts["train_documents"] == 0 or counts["eval_documents"] == 0:
            raise ValueError(
                f"The standard library at {stdlib_dir or 'default'} gave too few documents: {counts}."
            )
    return {"train_file": paths["train"], "eval_file": paths["eval"], **counts}
