"""RACE reader on small hand-made files (both layouts)."""

import json
import os

import pytest

from pipelines.finetune import race

RECORD = {"id": "high1.txt", "article": "Tom has a red bike. He rides it to school.",
          "questions": ["Tom's bike is _.", "How does Tom go to school?"],
          "options": [["red", "blue", "green", "black"],
                      ["By bus", "By bike", "On foot", "By car"]],
          "answers": ["A", "B"]}


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def test_option_building():
    assert race.build_choice("Tom's bike is _.", "red") == "Tom's bike is red."
    assert race.build_choice("_ and _ go", "we") == "we and we go"  # every blank, as the original
    assert race.build_choice("How?", "By bike") == "How? By bike"


def test_all_txt_json_lines(tmp_path):
    middle = dict(RECORD, id="middle7.txt", questions=["Q?"], options=[["a", "b", "c", "d"]],
                  answers=["D"])
    _write(os.path.join(str(tmp_path), "RACE", "dev", "high", "all.txt"), json.dumps(RECORD) + "\n")
    _write(os.path.join(str(tmp_path), "RACE", "dev", "middle", "all.txt"),
           json.dumps(middle) + "\n")
    examples = race.read_race(str(tmp_path), "dev")
    assert [(e.example_id, e.level, e.label) for e in examples] == [
        ("middle7.txt-0", "middle", 3), ("high1.txt-0", "high", 0), ("high1.txt-1", "high", 1)]
    assert examples[1].choices == ("Tom's bike is red.", "Tom's bike is blue.",
                                   "Tom's bike is green.", "Tom's bike is black.")
    assert examples[2].choices[1] == "How does Tom go to school? By bike"
    assert examples[1].context == RECORD["article"]


def test_one_record_per_file(tmp_path):
    folder = os.path.join(str(tmp_path), "train", "high")  # data_dir is the RACE folder itself
    _write(os.path.join(folder, "2.txt"), json.dumps(dict(RECORD, id="2.txt"), indent=1))
    _write(os.path.join(folder, "1.txt"), json.dumps(RECORD))
    examples = race.read_race(str(tmp_path), "train", levels=["high"])
    assert [e.example_id for e in examples] == ["high1.txt-0", "high1.txt-1", "2.txt-0", "2.txt-1"]


def test_errors_name_file_and_line(tmp_path):
    path = _write(os.path.join(str(tmp_path), "RACE", "dev", "high", "all.txt"),
                  json.dumps(RECORD) + "\n{broken\n")
    with pytest.raises(ValueError, match=f"{path}:2: malformed JSON"):
        race.read_race(str(tmp_path), "dev")
    _write(path, json.dumps(dict(RECORD, answers=["A", "E"])) + "\n")
    with pytest.raises(ValueError, match=f"{path}:1: question 1 has answer 'E'"):
        race.read_race(str(tmp_path), "dev")
    _write(path, json.dumps(dict(RECORD, options=[["a", "b"], ["c", "d", "e", "f"]])) + "\n")
    with pytest.raises(ValueError, match="question 0 has 2 options, expected 4"):
        race.read_race(str(tmp_path), "dev")
    _write(path, json.dumps({"id": "x", "questions": [], "options": []}) + "\n")
    with pytest.raises(ValueError, match=f"{path}:1: missing field 'article'"):
        race.read_race(str(tmp_path), "dev")
    _write(path, "")
    with pytest.raises(ValueError, match=f"{path}: the file is empty"):
        race.read_race(str(tmp_path), "dev")
    with pytest.raises(FileNotFoundError, match="No RACE files for split 'train'"):
        race.read_race(str(tmp_path), "train")
