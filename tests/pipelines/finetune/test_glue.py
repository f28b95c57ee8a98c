"""GLUE reader on small hand-made TSV files in the GLUE layout."""

import os

import numpy as np
import pytest

from pipelines.finetune import common, glue


def _write(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _tsv(*fields):
    return "\t".join(fields)


@pytest.fixture()
def glue_dir(tmp_path):
    root = str(tmp_path)
    # CoLA: no header in train/dev; label column 1, text column 3; test has a header.
    _write(os.path.join(root, "CoLA", "train.tsv"),
           [_tsv("gj04", "1", "", "The sailors rode the breeze."),
            _tsv("gj04", "0", "*", "The more books I ask to whom he will give.")])
    _write(os.path.join(root, "CoLA", "test.tsv"),
           [_tsv("index", "sentence"), _tsv("0", "Bill whistled past the house.")])
    # MRPC: label 0, texts 3 and 4; a quote inside a field must not start quoting.
    _write(os.path.join(root, "MRPC", "dev.tsv"),
           [_tsv("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
            _tsv("1", "702876", "702977", 'He said "yes', "He agreed."),
            _tsv("0", "2108705", "2108831", "Yucaipa owned it.", "It was sold.")])
    # STS-B: texts 7 and 8, float score last.
    header = _tsv("index", "genre", "filename", "year", "old_index", "source1", "source2",
                  "sentence1", "sentence2", "score")
    _write(os.path.join(root, "STS-B", "train.tsv"),
           [header, _tsv("0", "main", "f", "2012", "1", "none", "none", "A plane.", "An air plane.",
                         "5.000"),
            _tsv("1", "main", "f", "2012", "4", "none", "none", "A man.", "A cat.", "0.5")])
    # MNLI: texts 8 and 9, label last; dev_matched vs dev_mismatched.
    mnli_header = _tsv(*["c%d" % i for i in range(8)], "sentence1", "sentence2", "gold_label")
    row = lambda a, b, label: _tsv(*["x"] * 8, a, b, label)  # noqa: E731
    _write(os.path.join(root, "MNLI", "dev_matched.tsv"),
           [mnli_header, row("P1", "H1", "neutral"), row("P2", "H2", "contradiction")])
    _write(os.path.join(root, "MNLI", "dev_mismatched.tsv"),
           [mnli_header, row("P3", "H3", "entailment")])
    # QQP: a garbage line with too few fields is skipped like the original.
    _write(os.path.join(root, "QQP", "train.tsv"),
           [_tsv("id", "qid1", "qid2", "question1", "question2", "is_duplicate"),
            _tsv("7", "1", "2", "How old?", "What age?", "1"),
            _tsv("8", "3", "broken"),
            _tsv("9", "4", "5", "Why?", "How?", "0")])
    # RTE: texts 1 and 2, string labels.
    _write(os.path.join(root, "RTE", "train.tsv"),
           [_tsv("index", "sentence1", "sentence2", "label"),
            _tsv("0", "A dog runs.", "An animal moves.", "entailment"),
            _tsv("1", "A dog runs.", "A cat sleeps.", "contradiction")])
    return root


def test_cola_columns_without_header(glue_dir):
    examples, labels = glue.read_glue(glue_dir, "cola", "train")
    assert labels == ["0", "1"]
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ("The sailors rode the breeze.", None, "1"),
        ("The more books I ask to whom he will give.", None, "0")]
    assert examples[0].source.endswith(os.path.join("CoLA", "train.tsv") + ":1")


def test_test_split_is_unlabelled_with_file_ids(glue_dir):
    examples, _ = glue.read_glue(glue_dir, "glue/CoLA", "test")
    assert [(e.guid, e.text_a, e.label) for e in examples] == [
        ("0", "Bill whistled past the house.", None)]


def test_mrpc_pair_columns_and_literal_quotes(glue_dir):
    examples, _ = glue.read_glue(glue_dir, "mrpc", "dev")
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ('He said "yes', "He agreed.", "1"), ("Yucaipa owned it.", "It was sold.", "0")]


def test_stsb_float_labels_are_regression(glue_dir):
    examples, labels = glue.read_glue(glue_dir, "sts-b", "train")
    assert labels == [] and glue.glue_task("stsb").is_regression
    assert [e.label for e in examples] == [5.0, 0.5]
    targets = common.encode_labels(examples, labels, regression=True)
    assert targets.dtype == np.float32 and targets.tolist() == [5.0, 0.5]


def test_mnli_matched_and_mismatched_files(glue_dir):
    matched, labels = glue.read_glue(glue_dir, "mnli", "dev")
    mismatched, _ = glue.read_glue(glue_dir, "mnli-mm", "dev")
    assert labels == ["contradiction", "entailment", "neutral"]
    assert [(e.text_a, e.text_b, e.label) for e in matched] == [
        ("P1", "H1", "neutral"), ("P2", "H2", "contradiction")]
    assert [e.text_a for e in mismatched] == ["P3"]
    assert common.encode_labels(matched, labels).tolist() == [2, 0]


def test_qqp_skips_short_lines(glue_dir):
    examples, _ = glue.read_glue(glue_dir, "qqp", "train")
    assert [(e.text_a, e.label) for e in examples] == [("How old?", "1"), ("Why?", "0")]


def test_qqp_test_line_with_too_few_fields_names_the_line(glue_dir):
    # The original's QQP test reader has no skip (its row would be missing from submit_results.tsv).
    path = os.path.join(glue_dir, "QQP", "test.tsv")
    _write(path, [_tsv("id", "question1", "question2"), _tsv("0", "How old?", "What age?"),
                  _tsv("1", "broken")])
    with pytest.raises(ValueError, match=f"{path}:3: missing text_b column 2"):
        glue.read_glue(glue_dir, "qqp", "test")


def test_unknown_label_names_file_and_line(glue_dir):
    path = os.path.join(glue_dir, "RTE", "train.tsv")
    with pytest.raises(ValueError, match=f"{path}:3: label 'contradiction' is not one of"):
        glue.read_glue(glue_dir, "rte", "train")


def test_missing_column_names_file_and_line(glue_dir):
    path = os.path.join(glue_dir, "MRPC", "dev.tsv")
    _write(path, [_tsv("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"),
                  _tsv("1", "1", "2", "only one text")])
    with pytest.raises(ValueError, match=f"{path}:2: missing text_b column 4"):
        glue.read_glue(glue_dir, "mrpc", "dev")


def test_empty_and_missing_files(glue_dir):
    _write(os.path.join(glue_dir, "WNLI", "train.tsv"), ["index\tsentence1\tsentence2\tlabel"])
    with pytest.raises(ValueError, match="no examples"):
        glue.read_glue(glue_dir, "wnli", "train")
    with pytest.raises(FileNotFoundError, match="dev.tsv"):
        glue.read_glue(glue_dir, "wnli", "dev")
    with pytest.raises(ValueError, match="Unknown GLUE task 'squad'"):
        glue.read_glue(glue_dir, "squad", "train")


def test_files_directly_in_data_dir(glue_dir):
    task_dir = os.path.join(glue_dir, "CoLA")
    examples, _ = glue.read_glue(task_dir, "cola", "train")
    assert len(examples) == 2


def test_pairs_and_singles(glue_dir):
    pairs, labels = glue.read_glue(glue_dir, "mnli", "dev")
    assert [(e.text_a, e.text_b) for e in pairs] == [("P1", "H1"), ("P2", "H2")]
    assert common.encode_labels(pairs, labels).tolist() == [2, 0]
    singles, _ = glue.read_glue(glue_dir, "cola", "test")
    assert singles[0].text_a == "Bill whistled past the house."
    assert singles[0].text_b is None and singles[0].label is None
