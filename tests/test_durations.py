"""The CPU-time record of the suite (tests/cpu_times.py) and its growth check (tests/durations.py)."""

import doctest
import json
import os
import subprocess
import sys

import pytest

from tests import cpu_times, durations

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_examples_of_the_growth_rule_hold():
    result = doctest.testmod(durations, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3 and result.failed == 0


def _write_record(folder, worker, files, tests=None):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"cpu-{worker}.json"), "w", encoding="utf-8") as f:
        json.dump({"files": files, "wall": files, "tests": tests or {k: 1 for k in files}}, f)


def test_records_of_both_workers_are_summed_and_a_grown_file_fails_the_check(tmp_path, capsys):
    run = tmp_path / "run"
    # Worker gw0 ran a.py and b.py, gw1 ran c.py and the rest of b.py's time.
    _write_record(str(run), "gw0", {"tests/a.py": 30.0, "tests/b.py": 20.0})
    _write_record(str(run), "gw1", {"tests/b.py": 20.0, "tests/c.py": 100.0})
    merged = durations.merge_records(str(run))
    assert merged["files"] == {"tests/a.py": 30.0, "tests/b.py": 40.0, "tests/c.py": 100.0}
    assert merged["tests"]["tests/b.py"] == 2

    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"environments": {"main": {"files": {
        "tests/a.py": 30.0, "tests/b.py": 20.0, "tests/c.py": 100.0}}}}))
    assert durations.check(str(run), "main", str(record)) == 1  # b.py doubled (+20 s), the others held
    out = capsys.readouterr().out
    assert "tests/b.py: 20.0 CPU-s recorded" in out and "tests/a.py:" not in out.split("recorded):")[-1]

    durations.update(str(run), "main", str(record))
    assert json.loads(record.read_text())["environments"]["main"]["files"]["tests/b.py"] == 40.0
    assert durations.check(str(run), "main", str(record)) == 0


def test_a_slower_machine_is_not_a_grown_file(tmp_path):
    run = tmp_path / "run"
    _write_record(str(run), "gw0", {"tests/a.py": 60.0, "tests/b.py": 40.0, "tests/c.py": 210.0})
    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"environments": {"main": {"files": {
        "tests/a.py": 30.0, "tests/b.py": 20.0, "tests/c.py": 100.0}}}}))
    assert durations.check(str(run), "main", str(record)) == 0  # every file about 2x: the machine


def test_the_record_keeps_each_files_highest_time_over_runs(tmp_path):
    _write_record(str(tmp_path / "one"), "gw0", {"tests/a.py": 30.0, "tests/b.py": 20.0})
    _write_record(str(tmp_path / "two"), "gw0", {"tests/a.py": 25.0, "tests/b.py": 26.0, "tests/c.py": 5.0})
    record = tmp_path / "durations.json"
    durations.update([str(tmp_path / "one"), str(tmp_path / "two")], "main", str(record))
    written = json.loads(record.read_text())["environments"]["main"]
    assert written["files"] == {"tests/a.py": 30.0, "tests/b.py": 26.0, "tests/c.py": 5.0} and written["runs"] == 2


def test_an_environment_without_a_record_is_not_growth(tmp_path, capsys):
    _write_record(str(tmp_path / "run"), "gw0", {"tests/a.py": 300.0, "tests/b.py": 20.0, "tests/c.py": 40.0})
    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"environments": {"main": {"files": {
        "tests/a.py": 30.0, "tests/b.py": 20.0, "tests/c.py": 40.0}}}}))
    assert durations.check(str(tmp_path / "run"), "extras", str(record)) == 0
    assert "holds no record of the extras environment" in capsys.readouterr().out
    assert durations.check(str(tmp_path / "run"), "main", str(record)) == 1


def test_small_growth_past_the_budget_fails_the_check_though_no_file_grew(tmp_path, capsys):
    """Creep: two new files under the per-file floor, the others as recorded: the per-file rule passes them, the
    budget does not."""
    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"environments": {"main": {"budget_cpu_s": 160.0, "files": {
        "tests/a.py": 30.0, "tests/b.py": 20.0, "tests/c.py": 100.0}}}}))
    _write_record(str(tmp_path / "held"), "gw0", {"tests/a.py": 30.0, "tests/b.py": 20.0, "tests/c.py": 100.0})
    assert durations.check(str(tmp_path / "held"), "main", str(record)) == 0
    assert "within its budget of 160 CPU-s at the recorded speed (150)" in capsys.readouterr().out
    creep = {"tests/a.py": 30.0, "tests/b.py": 20.0, "tests/c.py": 100.0, "tests/d.py": 14.0, "tests/e.py": 14.0}
    _write_record(str(tmp_path / "creep"), "gw0", creep)
    assert durations.grown_files(creep, {"tests/a.py": 30.0, "tests/b.py": 20.0, "tests/c.py": 100.0}) == []
    assert durations.check(str(tmp_path / "creep"), "main", str(record)) == 1
    assert ("budget is spent: the run took 178 CPU-s at the recorded speed (178 here / 1.00), over its budget of "
            "160 CPU-s") in capsys.readouterr().out
    # The same run on a machine twice as slow: still over (the factor comes from the files as recorded).
    _write_record(str(tmp_path / "slow"), "gw0", {name: 2 * seconds for name, seconds in creep.items()})
    assert durations.check(str(tmp_path / "slow"), "main", str(record)) == 1


def test_update_refuses_a_record_over_the_budget_unless_it_is_raised(tmp_path):
    record = tmp_path / "durations.json"
    record.write_text(json.dumps({"environments": {"main": {"budget_cpu_s": 160.0, "files": {"tests/a.py": 150.0}}}}))
    before = record.read_text()
    _write_record(str(tmp_path / "run"), "gw0", {"tests/a.py": 150.0, "tests/b.py": 14.0})
    with pytest.raises(SystemExit, match="files take 164 CPU-s, over its budget of 160: .* --budget_cpu_s"):
        durations.update(str(tmp_path / "run"), "main", str(record))
    assert record.read_text() == before  # nothing written
    durations.main(["update", str(tmp_path / "run"), "--durations_file", str(record), "--budget_cpu_s", "170"])
    written = json.loads(record.read_text())["environments"]["main"]
    assert written["budget_cpu_s"] == 170.0 and written["files"]["tests/b.py"] == 14.0
    durations.update(str(tmp_path / "run"), "main", str(record))  # a later update keeps the budget
    assert json.loads(record.read_text())["environments"]["main"]["budget_cpu_s"] == 170.0


def test_a_missing_record_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no cpu-\\*.json in"):
        durations.merge_records(str(tmp_path))


def test_the_plugin_charges_each_file_and_each_session_fixture(tmp_path):
    """A real pytest run of two files: a child process's CPU time counts; a session fixture is charged once."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        "import pytest, subprocess, sys\n"
        "def pytest_configure(config):\n"
        "    from tests.cpu_times import CpuTimes\n"
        "    config.pluginmanager.register(CpuTimes(), 'cpu')\n"
        "@pytest.fixture(scope='session')\n"
        "def costly():\n"
        "    subprocess.run([sys.executable, '-c', 'sum(i * i for i in range(3_000_000))'], check=True)\n")
    (suite / "test_spends.py").write_text(
        "import subprocess, sys\n"
        "def test_child(costly):\n"
        "    subprocess.run([sys.executable, '-c', 'sum(i * i for i in range(12_000_000))'], check=True)\n")
    (suite / "test_idle.py").write_text("def test_nothing(costly):\n    assert True\n")
    out = tmp_path / "cpu"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}  # a plain run, not a worker
    env.update(ALBERT_TF_CPU_TIMES=str(out), PYTHONPATH=REPO)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
                            env=env, capture_output=True, text=True, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads((out / "cpu-main.json").read_text())
    files = {os.path.basename(k): v for k, v in record["files"].items()}
    fixture = files.pop(cpu_times.SESSION_FIXTURE_PREFIX + "costly")
    assert fixture > 0.1  # the fixture's child process
    # Four times the fixture's work, in a child of the test. (Twice was too close: each child also pays Python's
    # start-up, about as much as 3M squares, so 2x the work read as 1.3-1.5x the CPU time.)
    assert files["test_spends.py"] > 1.5 * fixture
    assert files["test_idle.py"] < 0.5 * fixture  # the fixture's cost is not charged to the file that met it
    assert record["tests"][cpu_times.SESSION_FIXTURE_PREFIX + "costly"] == 1
