"""Task builders over any documents: balance, determinism, held-out documents, files albert-finetune reads."""

import collections
import json

import pytest

from pipelines import machine_tasks as mt


def _documents(n=40, sentences=8):
    """Documents whose sentences name their document and position (so tests can read the truth back)."""
    return [(f"pkg/mod{d}.py", [f"Document {d} sentence {i} says something." for i in range(sentences - d % 3)])
            for d in range(n)]


def _doc_of(sentence):
    return int(sentence.split()[1])


def _position_of(sentence):
    return int(sentence.split()[3])


def test_split_documents_is_seeded_and_whole_documents():
    docs = _documents(200)
    a = mt.split_documents(docs, 0.2, seed=3)
    b = mt.split_documents(docs, 0.2, seed=3)
    c = mt.split_documents(docs, 0.2, seed=4)
    assert a == b and a != c
    train_keys = {k for k, _ in a["train"]}
    dev_keys = {k for k, _ in a["dev"]}
    assert not train_keys & dev_keys and len(train_keys | dev_keys) == 200
    # 200 draws at p = 0.2: mean 40, sd about 5.7; 6 sd either side.
    assert 6 <= len(dev_keys) <= 74


def test_split_documents_errors_quote_the_value():
    with pytest.raises(ValueError, match="1.5"):
        mt.split_documents(_documents(), 1.5, seed=0)
    with pytest.raises(ValueError, match="pkg/mod0.py"):
        mt.split_documents(_documents(3) + _documents(1), 0.5, seed=0)


def test_same_document_pairs_balanced_truthful_and_disjoint():
    task = mt.same_document_pairs(_documents(60), dev_fraction=0.25, seed=7)
    for split, rows in task.items():
        counts = collections.Counter(label for _, _, label in rows)
        assert counts["same"] == counts["different"] > 0, split
        for a, b, label in rows:
            assert a != b
            assert (_doc_of(a) == _doc_of(b)) == (label == "same")
    train_docs = {_doc_of(t) for row in task["train"] for t in row[:2]}
    dev_docs = {_doc_of(t) for row in task["dev"] for t in row[:2]}
    assert not train_docs & dev_docs  # dev documents never seen in training
    assert not {r[:2] for r in task["train"]} & {r[:2] for r in task["dev"]}


def test_same_document_pairs_deterministic_and_limited():
    docs = _documents(60)
    first = mt.same_document_pairs(docs, seed=1, max_train_examples=51, max_dev_examples=10)
    assert first == mt.same_document_pairs(docs, seed=1, max_train_examples=51, max_dev_examples=10)
    assert first != mt.same_document_pairs(docs, seed=2, max_train_examples=51, max_dev_examples=10)
    assert len(first["train"]) == 50 and len(first["dev"]) == 10  # even: exactly balanced


def test_relative_position_labels_are_the_positions():
    docs = _documents(50)
    task = mt.relative_position(docs, min_sentences=6, dev_fraction=0.3, seed=5)
    lengths = {d: len(s) for d, (_, s) in enumerate(docs)}
    for rows in task.values():
        for text, label in rows:
            n = lengths[_doc_of(text)]
            assert n >= 6
            assert label == pytest.approx(_position_of(text) / (n - 1), abs=1e-6)
    assert not {_doc_of(t) for t, _ in task["train"]} & {_doc_of(t) for t, _ in task["dev"]}
    labels = [label for _, label in task["train"]]
    assert min(labels) == 0.0 and max(labels) == 1.0
    assert task == mt.relative_position(docs, min_sentences=6, dev_fraction=0.3, seed=5)


def test_relative_position_drops_dev_text_seen_in_train():
    shared = "A sentence every module repeats verbatim."
    docs = [(f"m{i}", [f"Module {i} line {j}." for j in range(5)] + [shared]) for i in range(30)]
    task = mt.relative_position(docs, dev_fraction=0.3, seed=0)
    assert any(t == shared for t, _ in task["train"])
    assert not any(t == shared for t, _ in task["dev"])


def test_written_files_read_by_albert_finetune_reader(tmp_path):
    from pipelines.finetune.tabular import read_tabular_task

    pairs = mt.same_document_pairs(_documents(40), seed=0, max_train_examples=20, max_dev_examples=8)
    info = mt.write_task(str(tmp_path / "pairs"), pairs)
    assert info["train_labels"] == {"different": 10, "same": 10}
    data = read_tabular_task(str(tmp_path / "pairs"))
    assert data.label_names == ["different", "same"]
    assert [(e.text_a, e.text_b, e.label) for e in data.dev] == pairs["dev"]
    positions = mt.relative_position(_documents(40), seed=0, max_train_examples=15, max_dev_examples=5)
    mt.write_task(str(tmp_path / "pos"), positions)
    reg = read_tabular_task(str(tmp_path / "pos"), regression=True)
    assert [(e.text_a, e.label) for e in reg.train] == positions["train"]
    assert mt.read_task(str(tmp_path / "pos")) == positions
    with open(tmp_path / "pos" / "dev.jsonl", encoding="utf-8") as f:
        assert set(json.loads(f.readline())) == {"text", "label"}
