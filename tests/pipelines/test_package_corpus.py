"""Tests of the package-docstring corpus (pipelines/package_corpus.py)."""

import os

import pytest

from pipelines import package_corpus


def _module(path, docstrings):
    """A source file whose module and functions carry the given docstrings."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = [f'"""{docstrings[0]}"""']
    for i, doc in enumerate(docstrings[1:]):
        body.append(f'def f{i}():\n    """{doc}"""\n')
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(body))


def _sentences(n, tag):
    return " ".join(f"The {tag} function number {i} returns a value." for i in range(n))


@pytest.fixture
def fake_packages(tmp_path):
    """Two packages, five folders of known size, a duplicate, a test folder and fenced code."""
    root = tmp_path / "site"
    _module(str(root / "alpha" / "__init__.py"), [_sentences(4, "alpha"), "Shared sentence across packages here."])
    _module(str(root / "alpha" / "core" / "ops.py"), [_sentences(6, "core"), _sentences(2, "core extra")])
    _module(str(root / "alpha" / "io" / "files.py"), [_sentences(3, "io")])
    _module(str(root / "alpha" / "tests" / "test_ops.py"), [_sentences(5, "testing")])
    _module(str(root / "beta" / "__init__.py"),
            ["Shared sentence across packages here. " + _sentences(3, "beta"),
             "Builds a layer.\n```python\nlayer = Dense(3)  # Code sentence inside a fence.\n```\nIt is fast and small."])
    _module(str(root / "beta" / "util" / "misc.py"), [_sentences(5, "util")])
    return {"alpha": str(root / "alpha"), "beta": str(root / "beta")}


def _read(path):
    with open(path, encoding="utf-8") as f:
        return [line for line in f.read().splitlines() if line]


def test_strip_fenced_code_drops_the_block_only():
    text = "Adds one.\n```python\nx = f(1)\n```\nReturns the sum."
    assert package_corpus.strip_fenced_code(text) == "Adds one.\n\nReturns the sum."


def test_corpus_holds_out_whole_folders_without_shared_sentences(fake_packages, tmp_path):
    info = package_corpus.write_package_corpus(str(tmp_path / "out"), heldout_fraction=0.3, seed=3,
                                               packages=("alpha", "beta"), roots=fake_packages)
    train, held = _read(info["train_file"]), _read(info["eval_file"])
    # alpha: 4 + 1 (shared) + 8 (core) + 3 (io); beta: 3 + 2 around the fence + 5 (util); the
    # shared sentence counted once, the test folder and the fenced code not at all.
    assert len(train) + len(held) == (4 + 1 + 8 + 3) + (3 + 2 + 5)
    assert info["duplicate_sentences"] == 1
    assert not set(train) & set(held)
    assert sum("Shared sentence" in s for s in train + held) == 1
    # Tests are skipped; the fenced code is gone, the prose around it stays.
    assert not any("testing" in s or "Dense" in s or "fence" in s for s in train + held)
    assert any(s == "It is fast and small." for s in train + held)
    # Held out by folder: all of a folder's sentences on one side, within the budget.
    folders = {"core": "alpha/core", "io": "alpha/io", "util": "beta/util"}
    for tag in folders:
        sides = {"eval" if any(f"The {tag} " in s for s in held) else None,
                 "train" if any(f"The {tag} " in s for s in train) else None} - {None}
        assert len(sides) == 1, tag
    assert 0 < len(held) <= 0.3 * (len(train) + len(held))
    assert info["eval_documents"] >= 1 and info["train_documents"] >= 1


def test_heldout_units_fill_the_budget_in_hash_order():
    docs = [(f"u{i}", ["s"] * (i + 1)) for i in range(20)]  # 210 sentences
    held = package_corpus.heldout_units(docs, 0.1, seed=7)
    used = sum(i + 1 for i in range(20) if f"u{i}" in held)
    assert used <= 21
    # Greedy: no unit left out would still have fitted.
    assert all(used + i + 1 > 21 for i in range(20) if f"u{i}" not in held)
    assert held != package_corpus.heldout_units(docs, 0.1, seed=8) or used == 0


def test_errors_name_the_problem(tmp_path, fake_packages):
    with pytest.raises(ValueError, match="heldout_fraction"):
        package_corpus.write_package_corpus(str(tmp_path), heldout_fraction=1.5, roots=fake_packages,
                                            packages=("alpha",))
    with pytest.raises(ValueError, match="no_such_package_xyz"):
        package_corpus.write_package_corpus(str(tmp_path), packages=("no_such_package_xyz",))
