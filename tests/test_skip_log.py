"""CI's two environments cover every test: the extras files list (tests/extras_files.txt), the run log of the
extras run beside the main one, and the rerun of what is left (tests/skip_log.py)."""

import doctest
import glob
import os
import re
import subprocess
import sys

from tests import skip_log

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The packages of the [bench] and [openvino] extras that tests import.
EXTRAS_PACKAGES = ("torch", "transformers", "openvino", "openvino_tokenizers", "nncf", "onnxruntime", "onnx",
                   "keras_hub", "optimum")


def test_the_remainder_examples_hold():
    result = doctest.testmod(skip_log)
    assert result.attempted >= 1 and result.failed == 0


def test_a_skipped_test_is_left_unless_it_or_its_module_ran():
    skipped = ["tests/a.py::t[1]", "tests/a.py::t[2]", "tests/b.py", "tests/c.py", "tests/a.py::t[1]"]
    ran = ["tests/a.py::t[1]", "tests/b.py::x", "tests/cc.py::y"]
    assert skip_log.remainder(skipped, ran) == ["tests/a.py::t[2]", "tests/c.py"]  # tests/cc.py is not tests/c.py
    assert skip_log.remainder(skipped, []) == ["tests/a.py::t[1]", "tests/a.py::t[2]", "tests/b.py", "tests/c.py"]
    assert skip_log.remainder([], ran) == []


def test_every_listed_file_exists_and_every_file_importing_an_extra_is_listed():
    listed = skip_log.extras_files()
    assert len(listed) == len(set(listed)) and listed
    for path in listed:
        assert os.path.isfile(os.path.join(REPO, path)), path
    pattern = re.compile(r"importorskip\(\s*[\"'](%s)[\"']" % "|".join(EXTRAS_PACKAGES))
    needing = set()
    for path in glob.glob(os.path.join(REPO, "tests", "**", "test_*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            if pattern.search(f.read()):
                needing.add(os.path.relpath(path, REPO).replace(os.sep, "/"))
    assert "tests/albert_tf/test_int8_export.py" in needing  # the scan finds the known ones
    assert sorted(needing - set(listed)) == []


def test_the_command_line_writes_the_remainder_and_lists_the_files(tmp_path):
    (tmp_path / "skipped.txt").write_text("tests/a.py::t\ntests/b.py\n", encoding="utf-8")
    (tmp_path / "ran.txt").write_text("tests/b.py::x\n", encoding="utf-8")
    out = tmp_path / "left.txt"
    done = subprocess.run([sys.executable, "-m", "tests.skip_log", "remainder", str(tmp_path / "skipped.txt"),
                           str(tmp_path / "ran.txt"), str(out)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.read_text(encoding="utf-8") == "tests/a.py::t\n" and done.stdout == "  tests/a.py::t\n"
    # No run log (the extras run did not run): everything skipped is left.
    subprocess.run([sys.executable, "-m", "tests.skip_log", "remainder", str(tmp_path / "skipped.txt"),
                    str(tmp_path / "none.txt"), str(out)], cwd=REPO, check=True, capture_output=True)
    assert out.read_text(encoding="utf-8") == "tests/a.py::t\ntests/b.py\n"
    files = subprocess.run([sys.executable, "-m", "tests.skip_log", "files"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    assert files == skip_log.extras_files()


def test_the_run_log_holds_the_passed_tests_and_the_skip_log_the_skipped(tmp_path):
    """A real pytest run under tests/conftest.py's hooks: passed node ids in ALBERT_TF_RAN_LOG, skips apart."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("from tests.conftest import pytest_runtest_logreport, pytest_sessionfinish\n")
    (suite / "test_mixed.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_passes(n):\n    assert n\n"
        "def test_skips():\n    pytest.skip('needs an extra')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.update(PYTHONPATH=REPO, ALBERT_TF_RAN_LOG=str(tmp_path / "ran.txt"),
               ALBERT_TF_SKIP_LOG=str(tmp_path / "skipped.txt"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
                           str(suite)], cwd=str(suite), env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "ran.txt").read_text(encoding="utf-8").split() == [
        "test_mixed.py::test_passes[1]", "test_mixed.py::test_passes[2]"]
    assert (tmp_path / "skipped.txt").read_text(encoding="utf-8").split() == ["test_mixed.py::test_skips"]
