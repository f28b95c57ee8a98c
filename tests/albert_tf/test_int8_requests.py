"""The int8 export's inputs and refusals, without NNCF or OpenVINO (albert_tf/export/int8.py, albert-export's flags).

The quantization itself and its measured cost: tests/albert_tf/test_int8_export.py ([openvino] environment).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from albert_tf.export import int8

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def test_calibration_file_of_single_texts_and_of_pairs(tmp_path):
    single = int8.read_lines(_write(tmp_path / "a.txt", "first text\n\n  \nsecond\r\n"))
    assert (single.texts, single.text_pairs) == (["first text", "second"], None)
    pairs = int8.read_lines(_write(tmp_path / "b.txt", "q one\tp one\nq two\tp two\n"))
    assert (pairs.texts, pairs.text_pairs) == (["q one", "q two"], ["p one", "p two"])
    assert pairs.source == f"--calibration_file={tmp_path / 'b.txt'}"


@pytest.mark.parametrize("text,quoted", [("", "holds no text"), ("a\tb\nc\n", "lines of [1, 2] tab-separated"),
                                         ("a\tb\tc\n", "lines of [3] tab-separated")])
def test_bad_calibration_file_is_refused_naming_the_flag(tmp_path, text, quoted):
    path = _write(tmp_path / "bad.txt", text)
    with pytest.raises(ValueError, match=f"--calibration_file='{path}'") as caught:
        int8.read_lines(path)
    assert quoted in str(caught.value)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        int8.read_lines(str(tmp_path / "missing.txt"))


def test_sample_is_seeded_keeps_order_and_rows_together():
    texts = int8.TextSet([f"t{i}" for i in range(50)], [f"p{i}" for i in range(50)], np.arange(50), "dev")
    a, b, c = texts.sample(10, seed=3), texts.sample(10, seed=3), texts.sample(10, seed=4)
    assert a.texts == b.texts and a.texts != c.texts
    ids = [int(t[1:]) for t in a.texts]
    assert ids == sorted(ids) and len(set(ids)) == 10
    assert a.text_pairs == [f"p{i}" for i in ids] and list(a.labels) == ids
    assert a.source == "dev (10 of 50, seed 3)"
    assert texts.sample(50, seed=0) is texts and texts.sample(80, seed=0) is texts


def test_text_set_refuses_mismatched_columns():
    with pytest.raises(ValueError, match="2 texts but 1 second texts"):
        int8.TextSet(["a", "b"], ["x"])
    with pytest.raises(ValueError, match="2 texts but 3 labels"):
        int8.TextSet(["a", "b"], labels=np.zeros(3))
    with pytest.raises(ValueError, match="no texts"):
        int8.TextSet([])


@pytest.mark.parametrize("pairs_given,trained_on_pairs,quoted", [
    (False, True, "are single texts, but the classifier was trained on text pairs"),
    (True, False, "are text pairs, but the classifier was trained on single texts"),
])
def test_pairs_must_match_what_the_classifier_was_trained_on(pairs_given, trained_on_pairs, quoted):
    texts = int8.TextSet(["a"], ["b"] if pairs_given else None, source="cal.txt")
    with pytest.raises(ValueError, match=rf"the calibration texts \(cal.txt\) {quoted}"):
        int8.check_request("int8", texts, None, trained_on_pairs)
    with pytest.raises(ValueError, match=rf"the dev texts \(cal.txt\) {quoted}"):  # the dev texts too
        int8.check_request("int8", int8.TextSet(["a"], ["b"] if trained_on_pairs else None), texts, trained_on_pairs)


def test_unknown_quantization_no_calibration_and_no_nncf_are_refused(monkeypatch):
    with pytest.raises(ValueError, match=r"--quantize='int4'.*\('int8',\)"):
        int8.check_request("int4", int8.TextSet(["a"]), None, None)
    with pytest.raises(ValueError, match="needs calibration text: --calibration_file"):
        int8.check_request("int8", None, None, None)
    monkeypatch.setitem(sys.modules, "nncf", None)  # as where the [openvino] extra is not installed
    with pytest.raises(ValueError, match=r"needs NNCF, part of the \[openvino\] extra"):
        int8.check_request("int8", int8.TextSet(["a"]), None, None)


@pytest.mark.parametrize("report,refused", [
    ({"examples": 10, "source": "dev", "metric": "accuracy", "float": 90.0, "int8": 88.0, "drop": 2.0}, True),
    ({"examples": 10, "source": "dev", "metric": "accuracy", "float": 90.0, "int8": 89.0, "drop": 1.0}, False),
    ({"examples": 10, "source": "dev", "metric": "accuracy", "float": 90.0, "int8": 91.0, "drop": -1.0}, False),
    ({"examples": 10, "source": "cal", "agreement": 50.0}, False),  # no labels: no accuracy to hold to a bound
])
def test_cost_past_the_threshold_is_refused(report, refused):
    if not refused:
        int8.check_cost(report, 1.0)
        return
    with pytest.raises(ValueError) as caught:
        int8.check_cost(report, 1.0)
    assert str(caught.value).startswith("--quantize=int8: int8 vs float on 10 texts of dev: accuracy 88.00 vs 90.00 "
                                        "(2.00 points lost), more than --int8_max_accuracy_drop=1; nothing was "
                                        "written.")


def test_cost_as_this_cpu_serves_it_is_held_to_the_threshold_too():
    """A bfloat16 CPU's figures (`on_this_cpu`) past the bound refuse the export even when float32's are within
    it; the message names the precision."""
    within = {"examples": 10, "source": "dev", "metric": "accuracy", "float": 90.0, "int8": 90.0, "drop": 0.0}
    int8.check_cost(dict(within, on_this_cpu=dict(within, precision="bf16")), 1.0)
    served = dict(within, int8=88.0, drop=2.0, precision="bf16")
    with pytest.raises(ValueError) as caught:
        int8.check_cost(dict(within, on_this_cpu=served), 1.0)
    assert str(caught.value).startswith(
        "--quantize=int8: int8 vs float on 10 texts of dev, both inferring in bf16 as this CPU serves them: accuracy "
        "88.00 vs 90.00 (2.00 points lost), more than --int8_max_accuracy_drop=1; nothing was written.")


def test_quantize_without_openvino_format_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "albert_tf.bin.export", f"--checkpoint={tmp_path}",
                           f"--export_dir={tmp_path / 'out'}", "--head=encoder", "--quantize=int8"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "--quantize=int8 quantizes an OpenVINO export: add --format=openvino." in done.stderr
    assert not os.path.exists(tmp_path / "out")
