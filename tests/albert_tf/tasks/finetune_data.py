"""Tiny hand-made data folders for every fine-tuning task type (a few examples each).

Words come from the made-up vocabulary the tiny SentencePiece model of
tests/albert_tf/task_testlib.py was trained on, so that texts tokenize into
several pieces.
"""

import csv
import json
import os

WORDS = ["ka", "lo", "mi", "ten", "ser", "qua", "vi", "don"]


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _sentence(i, n=4):
    return " ".join(WORDS[(i * 3 + k) % len(WORDS)] for k in range(n))


def glue_sst2(folder, n_train=12, n_dev=6, n_test=4):
    """SST-2 layout: sentence<TAB>label with a header; the test file has index<TAB>sentence."""
    rows = lambda n, off: "".join(f"{_sentence(i + off)}\t{int('ka' in _sentence(i + off))}\n"  # noqa: E731
                                  for i in range(n))
    _write(os.path.join(folder, "train.tsv"), "sentence\tlabel\n" + rows(n_train, 0))
    _write(os.path.join(folder, "dev.tsv"), "sentence\tlabel\n" + rows(n_dev, 100))
    _write(os.path.join(folder, "test.tsv"),
           "index\tsentence\n" + "".join(f"{i}\t{_sentence(i + 200)}\n" for i in range(n_test)))
    return folder


def glue_pairs(folder, task, n_train=8, n_dev=4, n_test=2):
    """MRPC or STS-B in GLUE's layout: sentence pairs; MRPC's label 1 when both start with the same word, STS-B's
    score 5 * (the share of words they share)."""
    def pair(i):
        a, b = _sentence(i), _sentence(i + (i % 2) * 3, 3)
        return a, b, (str(int(a.split()[0] == b.split()[0])) if task == "mrpc"
                      else f"{5 * len(set(a.split()) & set(b.split())) / 4:.3f}")

    if task == "mrpc":
        head = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
        row = lambda i: "{2}\t{3}\t{4}\t{0}\t{1}\n".format(*pair(i), 100 + i, 200 + i)  # noqa: E731
        test_row = lambda i: f"{i}\t{100 + i}\t{200 + i}\t{pair(i)[0]}\t{pair(i)[1]}\n"  # noqa: E731
        test_head = "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    else:
        names = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
        head, test_head = names + "\tscore\n", names + "\n"
        row = lambda i: f"{i}\tmain\tf\t2012\t{i}\tnone\tnone\t{pair(i)[0]}\t{pair(i)[1]}\t{pair(i)[2]}\n"  # noqa
        test_row = lambda i: f"{i}\tmain\tf\t2012\t{i}\tnone\tnone\t{pair(i)[0]}\t{pair(i)[1]}\n"  # noqa: E731
    _write(os.path.join(folder, "train.tsv"), head + "".join(row(i) for i in range(n_train)))
    _write(os.path.join(folder, "dev.tsv"), head + "".join(row(i) for i in range(100, 100 + n_dev)))
    _write(os.path.join(folder, "test.tsv"), test_head + "".join(test_row(i) for i in range(200, 200 + n_test)))
    return folder


def csv_pairs(folder, n_train=12, n_dev=6, n_test=3):
    """train/dev/test.csv with text, text_b and a string label (do the texts share a first word?)."""
    def write(split, n, off, labelled=True):
        with open(os.path.join(folder, f"{split}.csv"), "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "text_b"] + (["label"] if labelled else []))
            for i in range(n):
                a, b = _sentence(i + off), _sentence(i + off + (i % 2))
                row = [a, b] + ([["different", "same"][a.split()[0] == b.split()[0]]] if labelled else [])
                writer.writerow(row)
    os.makedirs(folder, exist_ok=True)
    write("train", n_train, 0)
    write("dev", n_dev, 50)
    write("test", n_test, 90, labelled=False)
    return folder


def _squad_file(path, version_2, n_paragraphs, offset):
    data = []
    for p in range(n_paragraphs):
        words = [WORDS[(p + k) % len(WORDS)] + WORDS[(p * 2 + k) % len(WORDS)] for k in range(10)]
        context = " ".join(words) + "."
        answer = words[3] + " " + words[4]
        qas = [{"id": f"q{offset + p}-0", "question": f"what is {words[2]}?",
                "answers": [{"text": answer, "answer_start": context.index(answer)}]}]
        if version_2:
            qas[0]["is_impossible"] = False
            qas.append({"id": f"q{offset + p}-1", "question": "where is nothing?", "answers": [],
                        "plausible_answers": [], "is_impossible": True})
        data.append({"title": f"t{p}", "paragraphs": [{"context": context, "qas": qas}]})
    _write(path, json.dumps({"version": "v2.0" if version_2 else "1.1", "data": data}))


def squad(folder, version_2=False, n_train=6, n_dev=3):
    """train.json and dev.json: one (v2: two, one unanswerable) question per paragraph."""
    _squad_file(os.path.join(folder, "train.json"), version_2, n_train, 0)
    _squad_file(os.path.join(folder, "dev.json"), version_2, n_dev, 100)
    return folder


def race(folder, n_train=6, n_dev=3):
    """RACE/{train,dev}/{middle,high}/all.txt: one record (two questions) per line."""
    def records(n, off):
        lines = []
        for i in range(n):
            lines.append(json.dumps({
                "id": f"r{off + i}.txt", "article": _sentence(i + off, 8) + ".",
                "questions": ["the word is _.", f"which {WORDS[i % 8]}?"],
                "options": [[WORDS[(i + k) % 8] for k in range(4)], [_sentence(i + k, 2) for k in range(4)]],
                "answers": ["ABCD"[i % 4], "ABCD"[(i + 1) % 4]]}))
        return "\n".join(lines) + "\n"
    for split, n, off in (("train", n_train, 0), ("dev", n_dev, 100)):
        _write(os.path.join(folder, "RACE", split, "middle", "all.txt"), records(n // 2 or 1, off))
        _write(os.path.join(folder, "RACE", split, "high", "all.txt"), records(n - n // 2 or 1, off + 50))
    return folder


def conll(folder, n_train=8, n_dev=4, n_test=2):
    """train/dev.txt "word TAG" lines (a word starting with "ka" is B-KA, the word after it I-KA); test untagged."""
    def sentences(n, off, tagged=True):
        blocks = []
        for i in range(n):
            words = [WORDS[(i + off + k) % 8] + WORDS[(i * 5 + k) % 8] for k in range(5)]
            lines, previous = [], "O"
            for word in words:
                tag = "B-KA" if word.startswith("ka") else ("I-KA" if previous == "B-KA" else "O")
                lines.append(f"{word} NN {tag}" if tagged else word)
                previous = tag
            blocks.append("\n".join(lines))
        return "-DOCSTART- -X- O\n\n" * tagged + "\n\n".join(blocks) + "\n"
    _write(os.path.join(folder, "train.txt"), sentences(n_train, 0))
    _write(os.path.join(folder, "dev.txt"), sentences(n_dev, 3))
    _write(os.path.join(folder, "test.txt"), sentences(n_test, 5, tagged=False))
    return folder
