import os

import pytest

from pipelines.stdlib_corpus import docstring_sentences, write_stdlib_corpus

MODULE = '''"""Tools for counting sheep.

The counter starts at zero. It never goes backwards!

    >>> count(3)
    3
"""


def count(n):
    """Return the number n. Sheep are counted one at a time. Ok."""
    return n


class Fence:
    """A fence the sheep jump over."""
'''


def test_docstring_sentences_drop_code_and_split_sentences():
    doc = "First sentence here. Second one follows!\n\n    >>> code()\n    1\n\nA third sentence."
    assert docstring_sentences(doc) == ["First sentence here.", "Second one follows!", "A third sentence."]


def test_write_corpus_from_a_fake_stdlib(tmp_path):
    lib = tmp_path / "lib"
    (lib / "test").mkdir(parents=True)
    for i in range(40):
        (lib / f"sheep{i:02d}.py").write_text(MODULE)
    (lib / "test" / "test_sheep.py").write_text(MODULE)  # test folders are skipped
    (lib / "broken.py").write_text("def (:\n")  # syntax errors are skipped, not fatal
    summary = write_stdlib_corpus(str(tmp_path / "out"), heldout_fraction=0.25, seed=1, stdlib_dir=str(lib))
    assert summary["train_documents"] + summary["eval_documents"] == 40
    assert 0 < summary["eval_documents"] < 20
    text = open(summary["train_file"], encoding="utf-8").read()
    documents = [d for d in text.split("\n\n") if d.strip()]
    assert documents[0].splitlines() == [
        "Tools for counting sheep.",
        "The counter starts at zero.",
        "It never goes backwards!",
        "Return the number n.",  # "Ok." is too short to be a sentence
        "Sheep are counted one at a time.",
        "A fence the sheep jump over.",
    ]
    again = write_stdlib_corpus(str(tmp_path / "again"), heldout_fraction=0.25, seed=1, stdlib_dir=str(lib))
    assert open(again["eval_file"]).read() == open(summary["eval_file"]).read()
    assert not [f for f in os.listdir(tmp_path / "out") if "tmp" in f]


def test_bad_fraction():
    with pytest.raises(ValueError, match="1.5"):
        write_stdlib_corpus("unused", heldout_fraction=1.5)


def test_too_few_documents_leave_no_file_behind(tmp_path):
    # One module: no held-out document, an error, and neither file (nor a
    # temporary one) is written; an earlier complete corpus stays as it was.
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "sheep.py").write_text(MODULE)
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.txt").write_text("earlier corpus\n")
    with pytest.raises(ValueError, match="too few documents"):
        write_stdlib_corpus(str(out), heldout_fraction=0.05, seed=1, stdlib_dir=str(lib))
    assert os.listdir(out) == ["train.txt"]
    assert (out / "train.txt").read_text() == "earlier corpus\n"
