"""CSV / TSV / JSON-lines reader (--task=csv) on small hand-made files."""

import csv
import json
import os

import pytest

from pipelines.finetune import common, tabular


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_csv_task_learns_sorted_labels(tmp_path):
    d = str(tmp_path)
    _write(os.path.join(d, "train.csv"),
           'text,label\n"Great, really great",positive\nawful,negative\nmeh,neutral\nok,positive\n')
    _write(os.path.join(d, "dev.csv"), "text,label\nfine,positive\nbad,negative\n")
    data = tabular.read_tabular_task(d)
    assert data.label_names == ["negative", "neutral", "positive"]
    assert [(e.text_a, e.text_b, e.label) for e in data.train[:2]] == [
        ("Great, really great", None, "positive"), ("awful", None, "negative")]
    assert data.test is None
    assert common.encode_labels(data.dev, data.label_names).tolist() == [2, 0]


def test_pair_columns_with_custom_names_and_unlabelled_test(tmp_path):
    d = str(tmp_path)
    _write(os.path.join(d, "train.tsv"), "id\tq\tp\ty\n1\tWho?\tHe did.\tyes\n2\tWhy?\tNo.\tno\n")
    _write(os.path.join(d, "dev.tsv"), 'id\tq\tp\ty\n3\t"Quoted\tx\tno\n')
    _write(os.path.join(d, "test.tsv"), "id\tq\tp\n4\tWhen?\tNow.\n")
    data = tabular.read_tabular_task(d, text_column="q", text_b_column="p", label_column="y")
    assert [(e.text_a, e.text_b, e.label) for e in data.train] == [
        ("Who?", "He did.", "yes"), ("Why?", "No.", "no")]
    assert data.dev[0].text_a == '"Quoted'  # a bare quote: the file is read without quoting
    assert [(e.text_a, e.text_b, e.label) for e in data.test] == [("When?", "Now.", None)]


def test_text_b_used_when_present(tmp_path):
    path = _write(os.path.join(str(tmp_path), "x.csv"), "label,text,text_b\n1,a,b\n")
    assert tabular.read_table(path)[0].text_b == "b"


def test_jsonl_and_regression(tmp_path):
    d = str(tmp_path)
    rows = [{"text": "a", "label": 0.5}, {"text": "b", "label": "2"}]
    _write(os.path.join(d, "train.jsonl"), "\n".join(json.dumps(r) for r in rows) + "\n")
    _write(os.path.join(d, "dev.jsonl"), json.dumps({"text": "c", "label": 1}) + "\n")
    data = tabular.read_tabular_task(d, regression=True)
    assert data.label_names == [] and [e.label for e in data.train] == [0.5, 2.0]
    assert common.encode_labels(data.train, [], regression=True).tolist() == [0.5, 2.0]


def test_jsonl_integer_labels_are_strings(tmp_path):
    d = str(tmp_path)
    _write(os.path.join(d, "train.jsonl"), '{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n')
    _write(os.path.join(d, "dev.jsonl"), '{"text": "c", "label": 1}\n')
    assert tabular.read_tabular_task(d).label_names == ["0", "1"]


def test_dev_label_not_in_train_names_file_and_line(tmp_path):
    d = str(tmp_path)
    _write(os.path.join(d, "train.csv"), "text,label\na,x\nb,y\n")
    dev = _write(os.path.join(d, "dev.csv"), "text,label\nc,x\nd,z\n")
    with pytest.raises(ValueError, match=f"{dev}:3: example 'dev-3' has label 'z', not one of"):
        tabular.read_tabular_task(d)


def test_missing_column_names_file_and_columns(tmp_path):
    path = _write(os.path.join(str(tmp_path), "train.csv"), "sentence,label\na,x\n")
    with pytest.raises(ValueError, match=r"train.csv:2: missing column\(s\) \['text'\]"):
        tabular.read_table(path)


def test_short_row_and_empty_label(tmp_path):
    path = _write(os.path.join(str(tmp_path), "a.csv"), "text,label\nok,x\nbroken\n")
    with pytest.raises(ValueError, match=f"{path}:3: 1 fields but the header has 2"):
        tabular.read_table(path)
    path = _write(os.path.join(str(tmp_path), "b.csv"), "text,label\nok,\n")
    with pytest.raises(ValueError, match=f"{path}:2: empty label in column 'label'"):
        tabular.read_table(path)


def test_malformed_json_line(tmp_path):
    path = _write(os.path.join(str(tmp_path), "train.jsonl"),
                  '{"text": "a", "label": "x"}\n\n{"text": "b", label: 1}\n')
    with pytest.raises(ValueError, match=f"{path}:3: malformed JSON"):
        tabular.read_table(path)


def test_empty_files(tmp_path):
    empty = _write(os.path.join(str(tmp_path), "e.csv"), "")
    with pytest.raises(ValueError, match=f"{empty}: the file is empty"):
        tabular.read_table(empty)
    header_only = _write(os.path.join(str(tmp_path), "h.csv"), "text,label\n")
    with pytest.raises(ValueError, match=f"{header_only}: no examples"):
        tabular.read_table(header_only)


def test_missing_split_file(tmp_path):
    _write(os.path.join(str(tmp_path), "train.csv"), "text,label\na,x\nb,y\n")
    with pytest.raises(FileNotFoundError, match="No dev file"):
        tabular.read_tabular_task(str(tmp_path))


def test_regression_label_must_be_numeric(tmp_path):
    path = _write(os.path.join(str(tmp_path), "r.csv"), "text,label\na,high\n")
    with pytest.raises(ValueError, match=f"{path}:2: the label must be a number"):
        tabular.read_table(path, regression=True)


def _writer_tsv(path, rows):
    """A TSV as Python's csv.writer(delimiter="\\t") writes it (pandas' to_csv(sep="\\t") quotes the same way)."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f, delimiter="\t").writerows(rows)
    return path


def test_tsv_written_by_csv_writer_reads_back_its_fields(tmp_path):
    rows = [["text", "label"], ['He said "great" and left', "pos"], ["a\ttab", "neg"],
            ['one "quote\nand a new line', "pos"], ["plain text", "neg"]]
    path = _writer_tsv(os.path.join(str(tmp_path), "train.tsv"), rows)
    with open(path, encoding="utf-8", newline="") as f:  # what the writer made of them
        assert f.read().split("\r\n")[1:4] == ['"He said ""great"" and left"\tpos', '"a\ttab"\tneg',
                                                '"one ""quote\nand a new line"\tpos']
    examples = tabular.read_table(path)
    assert [(e.text_a, e.label) for e in examples] == [tuple(row) for row in rows[1:]]
    # A record's line is its last line: the new line inside a field moves the rows after it by one.
    assert [e.guid for e in examples] == ["train-2", "train-3", "train-5", "train-6"]


def test_tsv_with_a_bare_quote_is_read_as_glue_writes_it(tmp_path):
    # GLUE-style: quotes inside fields, unbalanced, never doubled; and a field that starts with one.
    path = _write(os.path.join(str(tmp_path), "dev.tsv"),
                  'text\tlabel\nHe said "yes\tpos\n"Hello," she said.\tneg\n"quoted"\tpos\n')
    assert [(e.text_a, e.label) for e in tabular.read_table(path)] == [
        ('He said "yes', "pos"), ('"Hello," she said.', "neg"), ('"quoted"', "pos")]


@pytest.mark.parametrize("text, expected", [
    ('a\tb\r\n"x ""y"""\t"1\t2"\r\n', True),   # csv.writer's output
    ('a\tb\n""\tz\n', True),                    # an empty quoted field
    ('a\tb\nx\ty\n', False),                    # no quote at all: nothing to unquote
    ('a\tb\nsay "x"\ty\n', False),              # a quote inside a field
    ('a\tb\n"x" y\tz\n', False),                # text after the closing quote
    ('a\tb\n"open\tz\n', False),                # never closed
    ('a\tb\n"x"\ty\nsay "z\tw\n', False),      # one bare quote anywhere: the whole file is plain
])
def test_standard_quoting_is_detected_only_where_every_quote_is_such(text, expected):
    assert common.uses_standard_quoting(text) is expected
