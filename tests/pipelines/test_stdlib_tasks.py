"""The standard-library topic task: labels, module-level dev split, CSV files."""

import csv
import os

import pytest

from pipelines import stdlib_tasks

GROUPS = {"net": ("http", "email"), "files": ("os", "shutil", "glob")}


def _documents():
    # (module path, sentences): sizes chosen so that the split is checkable by hand.
    return [
        ("http/client.py", [f"Http sentence {i}." for i in range(6)]),
        ("email/parser.py", [f"Email sentence {i}." for i in range(4)]),
        ("email/header.py", [f"Header sentence {i}." for i in range(4)]),
        ("os.py", [f"Os sentence {i}." for i in range(8)]),
        ("shutil.py", [f"Shutil sentence {i}." for i in range(4)]),
        ("glob.py", [f"Glob sentence {i}." for i in range(2)]),
        ("antigravity.py", ["Not in any group at all."] * 3),
    ]


def test_topic_of_uses_the_top_level_package():
    assert stdlib_tasks.topic_of("email/mime/text.py", GROUPS) == "net"
    assert stdlib_tasks.topic_of("os.py", GROUPS) == "files"
    assert stdlib_tasks.topic_of("osx.py", GROUPS) is None
    assert stdlib_tasks.topic_of("json/__init__.py") == "text"


def test_passages_group_consecutive_sentences():
    assert stdlib_tasks.passages(["a.", "b.", "c.", "d.", "e."], 2) == ["a. b.", "c. d.", "e."]
    with pytest.raises(ValueError, match="sentences_per_example"):
        stdlib_tasks.passages(["a."], 0)


def test_split_keeps_modules_whole_and_every_topic_in_both_splits():
    examples = stdlib_tasks.build_stdlib_topic_task(documents=_documents(), groups=GROUPS,
                                                    sentences_per_example=2, dev_fraction=0.2, seed=3)
    train, dev = examples["train"], examples["dev"]
    # 3 + 2 + 2 + 4 + 2 + 1 passages in groups; the ungrouped module is dropped.
    assert len(train) + len(dev) == 14
    assert {label for _, label in dev} == {"net", "files"}
    assert {label for _, label in train} == {"net", "files"}
    module_of = lambda text: text.split(" sentence")[0]  # noqa: E731
    assert not {module_of(t) for t, _ in train} & {module_of(t) for t, _ in dev}
    assert all("Not in any group" not in t for t, _ in train + dev)
    # Each topic holds out at least its dev_fraction and at most half of its passages.
    for topic, total in (("net", 7), ("files", 7)):
        held = sum(label == topic for _, label in dev)
        assert 0.2 * total <= held <= 0.5 * total


def test_split_is_seeded():
    a = stdlib_tasks.build_stdlib_topic_task(documents=_documents(), groups=GROUPS, seed=1)
    b = stdlib_tasks.build_stdlib_topic_task(documents=_documents(), groups=GROUPS, seed=1)
    assert a == b


def test_write_task_files_read_back_with_the_csv_reader(tmp_path, monkeypatch):
    monkeypatch.setattr(stdlib_tasks, "iter_stdlib_documents", lambda stdlib_dir=None: iter(_documents()))
    summary = stdlib_tasks.write_stdlib_topic_task(str(tmp_path), groups=GROUPS, max_train_examples=5, seed=2)
    assert summary["train_examples"] == 5
    from pipelines.finetune import tabular

    table = tabular.read_tabular_task(str(tmp_path))
    assert len(table.train) == 5 and len(table.dev) == summary["dev_examples"]
    assert set(table.label_names) <= {"net", "files"}
    with open(os.path.join(tmp_path, "dev.csv"), newline="", encoding="utf-8") as f:
        assert next(csv.reader(f)) == ["text", "label"]


def test_majority_baseline_counts_by_hand():
    assert stdlib_tasks.majority_baseline(["x", "y", "y"], ["y", "x", "x", "x"]) == ("y", 0.25)
    with pytest.raises(ValueError):
        stdlib_tasks.majority_baseline([], ["x"])


def test_real_standard_library_gives_every_topic():
    examples = stdlib_tasks.build_stdlib_topic_task()
    topics = set(stdlib_tasks.TOPIC_GROUPS)
    assert {label for _, label in examples["train"]} == topics
    assert {label for _, label in examples["dev"]} == topics
    assert len(examples["train"]) > 3000 and len(examples["dev"]) > 500
