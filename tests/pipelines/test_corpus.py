"""Reading documents: grouping by blank lines and files, gzip, bad lines,
the cut of over-long documents."""

import gzip

import pytest

from pipelines import corpus


def docs_of(files, **kwargs):
    return [{k: (v.numpy().tolist() if hasattr(v, "numpy") else v) for k, v in d.items()}
            for d in corpus.documents_dataset(files, **kwargs)]


def test_documents_follow_blank_lines_and_file_ends(tmp_path):
    a = tmp_path / "a.txt"
    a.write_bytes(b"One  Two.\nThree four.\n\n\n\nFive six.\n\xff bad\nSeven.\n")
    b = tmp_path / "b.txt.gz"
    with gzip.open(b, "wb") as f:
        f.write(b"Eight ``nine''.\nTen.")  # no final newline
    docs = docs_of([str(a), str(b)], lines_per_block=2)
    assert [d["doc_id"] for d in docs] == [0, 1, 2]
    assert docs[0]["lines"] == [b"one two.", b"three four."]
    assert docs[1]["lines"] == [b"five six.", b"seven."] and docs[1]["bad_utf8"] == 1
    assert docs[2]["lines"] == [b"eight ``nine''.", b"ten."]  # the original keeps `` and '' (no XLNet rewrite)
    cased = docs_of([str(a)], do_lower_case=False)
    assert cased[0]["lines"][0] == b"One Two."


def test_long_lines_are_dropped_and_counted(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("short one.\n" + "y" * 5000 + "\nshort two.\n")
    docs = docs_of([str(path)], max_line_bytes=4096)
    assert docs[0]["lines"] == [b"short one.", b"short two."] and docs[0]["too_long"] == 1


def test_over_long_documents_are_cut(tmp_path):
    path = tmp_path / "flat.txt"
    path.write_text("".join(f"sentence {i}.\n" for i in range(50)))  # no blank line at all
    docs = docs_of([str(path)], max_document_lines=10, lines_per_block=4)
    sizes = [len(d["lines"]) for d in docs]
    assert sum(sizes) == 50 and len(sizes) > 1
    assert max(sizes) <= 10 + 4  # the cap plus at most one block
    flat = [line for d in docs for line in d["lines"]]
    assert flat == [f"sentence {i}.".encode() for i in range(50)]


def test_resolve_input_files_errors(tmp_path):
    (tmp_path / "x.txt").write_text("   \n\n")
    with pytest.raises(ValueError, match="Empty corpus"):
        corpus.resolve_input_files([str(tmp_path / "*.txt")])
    with pytest.raises(FileNotFoundError, match="nope"):
        corpus.resolve_input_files(f"{tmp_path}/x.txt,{tmp_path}/nope*.txt")
    (tmp_path / "y.txt").write_text("text.\n")
    assert corpus.resolve_input_files(f"{tmp_path}/y.txt,{tmp_path}/*.txt") == [
        str(tmp_path / "y.txt"), str(tmp_path / "x.txt")]
