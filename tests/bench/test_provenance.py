"""What a run file records about itself: the code (commit, dirty flag), the machine (model, clock, topology,
flags), every call's seconds, the machine's busy and stolen shares and other processes' share, and a load line
that says "above the cores" only when the load was, and "other jobs" only when other processes' share says so."""

import os
import subprocess
import sys
import time

import pytest

from bench import plan as P
from bench import report, run
from bench.systems import common


def _header(**extra):
    return dict(dict(command="python -m bench.run", date="today", minutes=1.0, load_start=0.5, load_end=0.6,
                     cpu={"model": "Test CPU", "cores": 2, "flags": ["avx2"]}, plan="default", versions={},
                     reps=3, threads=2), **extra)


@pytest.mark.parametrize("load_max,says", [(1.98, "(within the 2 cores, the benchmark's own threads included)"),
                                           (2.0, "(within the 2 cores"),
                                           (2.5, "(above the 2 cores: other jobs were running)")])
def test_the_load_line_says_above_the_cores_only_when_it_was(load_max, says):
    line = report.load_line(_header(load_max=load_max))
    assert says in line
    assert ("above the" in line) == (load_max > 2)


def test_the_committed_rerun_no_longer_claims_a_load_above_its_cores():
    with open(os.path.join(run.RESULTS_DIR, "avx512-bf16-infer.md"), encoding="utf-8") as f:
        text = f.read()
    assert "1.98 at most (within the 2 cores" in text and "above the 2 cores" not in text


def _measured(others):
    m = P.Measurement("train", "albert-tf step", "ours", "train_step", {})
    m.runs = [dict(per_s=1.0, rep=r, host_busy=0.99, host_steal=0.0, host_others=o) for r, o in enumerate(others)]
    return [m]


def test_a_load_above_the_cores_from_the_benchmarks_own_processes_is_not_called_other_jobs():
    # The load average counts the measurement's own threads and helpers (torch.compile's compile workers):
    # where the run recorded other processes' CPU share, that share decides what the header says.
    quiet, busy = _measured([0.01, 0.04]), _measured([0.02, 0.35])
    line = report.load_line(_header(load_max=2.16), quiet)
    assert "took 4% of the cores at most, so the load was the benchmark's own" in line
    assert "other jobs" not in line and report.load_warning(_header(load_max=2.16), quiet) == ""
    line = report.load_line(_header(load_max=2.16), busy)
    assert "took 35% of the cores at most: other jobs were running" in line
    assert "Other processes took up to 35% of the cores" in report.load_warning(_header(load_max=2.16), busy)
    # Other processes at 35% warn even when the load average stayed within the cores.
    assert "favour ours" in report.load_warning(_header(load_max=1.5), busy)
    assert "other processes 35% at most." in report.host_line(busy)


def test_other_processes_share_is_busy_minus_the_measurements_own_cpu(monkeypatch):
    # /proc/stat readings 1 s apart on 2 cores (200 ticks): 180 busy, of which the worker's own 1.5 CPU-s
    # (150 ticks): other processes took 30 of 200 ticks.
    readings = iter([[0, 0, 0, 0, 0, 0, 0, 0], [150, 0, 30, 20, 0, 0, 0, 0]])
    own = iter([10.0, 11.5])
    monkeypatch.setattr(run, "cpu_times", lambda: next(readings))
    monkeypatch.setattr(run, "children_cpu_s", lambda: next(own))
    monkeypatch.setattr(run.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(run.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 0, stdout='BENCH_RESULT {"per_s": 1.0}\n', stderr=""))
    m = P.Measurement("train", "albert-tf step", "ours", "train_step", {})
    run.run_one(m, timeout=10, python="python", rep=0, n_threads=2)
    assert m.runs[0]["host_busy"] == pytest.approx(0.9) and m.runs[0]["host_others"] == pytest.approx(0.15)


def test_children_cpu_counts_a_finished_childs_cpu_time():
    before = run.children_cpu_s()
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < 0.3: pass"], check=True)
    assert run.children_cpu_s() - before >= 0.25


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                            GIT_COMMITTER_EMAIL="t@t"))


def test_code_version_gives_the_commit_and_a_dirty_flag(tmp_path):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "bench" / "results" / "k.json").write_text("{}")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert run.code_version(str(tmp_path)) == {"commit": head, "dirty": False, "changed": []}
    (tmp_path / "bench" / "results" / "k.json").write_text("{1}")  # the run's own file: not a change of code
    assert run.code_version(str(tmp_path))["dirty"] is False
    (tmp_path / "a.py").write_text("x = 2\n")
    assert run.code_version(str(tmp_path)) == {"commit": head, "dirty": True, "changed": ["a.py"]}
    assert run.code_version(str(tmp_path / "no-repo"))["commit"] == "unknown"


def test_a_new_run_file_renders_its_provenance_and_the_machine():
    cpu = {"model": "AMD EPYC", "cores": 2, "flags": ["avx2", "fma"], "mhz": 2445.42, "sockets": 1,
           "cores_per_socket": 2, "threads_per_core": 1}
    ours = P.Measurement("infer", "albert-tf", "ours", "infer", dict(precision="float32", xla=False, batch=32, seq=128))
    ours.runs = [dict(per_s=5.0, rep=r, samples_s=[6.4, 6.5], host_busy=b, host_steal=s)
                 for r, (b, s) in enumerate(((0.98, 0.0), (1.0, 0.02), (0.99, 0.01)))]
    header = _header(cpu=cpu, cpu_kind="avx2", load_max=1.5, environment={"TF_ENABLE_ONEDNN_OPTS": "1"},
                     code={"commit": "abc123", "dirty": True, "changed": ["bench/run.py"]})
    text = report.render([ours], header)
    assert ("CPU: AMD EPYC, 2 cores; AMX: no; flags that matter: avx2, fma. Clock: 2445 MHz (/proc/cpuinfo), no "
            "maximum recorded; 1 socket(s) x 2 core(s) x 1 thread(s) per core.") in text
    assert ("Code: commit abc123 (DIRTY: the work tree differed from it in bench/run.py). Environment: "
            "TF_ENABLE_ONEDNN_OPTS=1.") in text
    assert "busy 99% (median over measurements; 100% at most), stolen by the hypervisor 2% at most." in text
    assert "Every timed call's seconds are in the JSON (samples_s)" in text
    old = report.render([ours], _header())
    assert "Code: not recorded (runs before issue 33" in old and "Clock:" not in old


def test_every_call_is_kept_not_only_the_median():
    got = common.per_second(8, [2.0, 1.0, 4.0])
    assert got["samples_s"] == [2.0, 1.0, 4.0] and got["per_s"] == 4.0 and got["worst_per_s"] == 2.0
    assert common.pass_rate(32, [1.0, 3.0])["samples_s"] == [1.0, 3.0]


def test_a_measurement_runs_with_its_environment_and_records_the_machines_share(monkeypatch):
    seen = {}

    def fake_run(cmd, cwd, env, capture_output, text, timeout):
        seen.update(env)
        time.sleep(0.2)  # some clock ticks of /proc/stat pass (100 per second per core)
        return subprocess.CompletedProcess(cmd, 0, stdout='BENCH_RESULT {"per_s": 1.0}\n', stderr="")

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    m = P.Measurement("train", "albert-tf step (oneDNN)", "ours", "train_step", {}, env={"TF_ENABLE_ONEDNN_OPTS": "1"})
    run.run_one(m, timeout=10, python="python", rep=0, n_threads=2)
    assert seen["TF_ENABLE_ONEDNN_OPTS"] == "1" and m.runs[0]["per_s"] == 1.0
    if os.path.exists("/proc/stat"):
        assert 0.0 <= m.runs[0]["host_busy"] <= 1.0 and 0.0 <= m.runs[0]["host_steal"] <= 1.0
    assert m.key.endswith(",env:TF_ENABLE_ONEDNN_OPTS=1")


def test_machine_share_needs_two_readings():
    assert run.machine_share([], [1, 2, 3]) == {}
    assert run.machine_share([0] * 8, [0] * 8) == {}
