"""Shared pytest configuration: quiet TensorFlow, fixed seeds, fixture paths, and CI's skip rules.

CI (.ci/run) runs the suite twice: once in the main environment ([test,beam]) and once in an environment with the
optional extras ([test,bench,openvino]: torch, transformers, OpenVINO, ONNX Runtime, keras-hub). Two environment
variables tie them together so that no test can go unrun by skipping:

- ``ALBERT_TF_SKIP_LOG=<file>``: every test or module that skips is written to <file>, one node id a line, in the
  form pytest reads back with ``pytest @<file>``.
- ``ALBERT_TF_NO_SKIPS=1``: any skip fails the run (the second environment reruns the first one's skips, and
  there nothing may skip: a missing package there is a broken install, not a reason).
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# XLA's CPU backend spends most of a tiny model's compile in LLVM's optimizer, which only speeds up the machine code:
# the HLO the tests check (fusions, the whole step's ops, their numerics within float32 rounding) is the same. Set
# for every process a test starts too; set XLA_FLAGS yourself to override.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")


def _pin_threads_per_worker():
    """Under pytest-xdist, size TensorFlow's and OpenMP's thread pools to this worker's share of the cores.

    Two workers whose TensorFlow each spins a pool as wide as the machine oversubscribe it; the variables are
    inherited by every process a test starts, so the binaries under test get the same share. Set them yourself
    to override.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers <= 1:
        return
    share = str(max(1, (os.cpu_count() or 1) // workers))
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(name, share)


_pin_threads_per_worker()

import pytest  # noqa: E402

from tests.cpu_times import CpuTimes  # noqa: E402  (after the thread variables, before anything imports TF)
from tests.shared_work import build_once  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")

_SKIPPED = []  # (node id, reason)


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def pytest_collectreport(report):
    if report.skipped:  # a module-level importorskip
        _SKIPPED.append((report.nodeid, _reason(report)))


def pytest_runtest_logreport(report):
    if report.skipped and report.when in ("setup", "call"):
        _SKIPPED.append((report.nodeid, _reason(report)))


def pytest_configure(config):
    config.pluginmanager.register(CpuTimes(), "albert_tf_cpu_times")


def _is_xdist_worker(session) -> bool:
    return hasattr(session.config, "workerinput")


def pytest_collection_modifyitems(session, config, items):
    """Heaviest files first (by tests/durations.json), so that `-n 2 --dist loadfile` ends both workers together.

    Within a file the order is kept. Files the durations file does not know go last, in collection order.
    """
    cpu = recorded_cpu_seconds()
    if not cpu:
        return
    first_index = {}
    for index, item in enumerate(items):
        first_index.setdefault(item.nodeid.split("::", 1)[0], index)
    items.sort(key=lambda item: (-cpu.get(item.nodeid.split("::", 1)[0], 0.0),
                                 first_index[item.nodeid.split("::", 1)[0]]))


def recorded_cpu_seconds() -> dict:
    """{test file: CPU seconds} of both environments from tests/durations.json ({} when absent)."""
    path = os.path.join(os.path.dirname(__file__), "durations.json")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        recorded = json.load(f)
    cpu = {}
    for environment in recorded.get("environments", {}).values():
        for name, seconds in environment.get("files", {}).items():
            cpu[name] = max(cpu.get(name, 0.0), seconds)
    return cpu


def pytest_sessionfinish(session, exitstatus):
    if _is_xdist_worker(session):
        return  # the controller receives every worker's reports and writes the skip log once
    log = os.environ.get("ALBERT_TF_SKIP_LOG")
    if log:
        with open(log, "w", encoding="utf-8") as f:
            f.writelines(f"{nodeid}\n" for nodeid, _ in _SKIPPED)
    if os.environ.get("ALBERT_TF_NO_SKIPS") and _SKIPPED:
        lines = "\n".join(f"  {nodeid}: {reason}" for nodeid, reason in _SKIPPED)
        print(f"\nALBERT_TF_NO_SKIPS is set and {len(_SKIPPED)} test(s) skipped:\n{lines}")
        session.exitstatus = 1


@pytest.fixture(scope="session")
def finetuned_sst2(tmp_path_factory):
    """One fine-tuned folder for the whole run, by the installed albert-finetune: 12 SST-2 examples, 12 steps.

    {"root": the folder holding its vocabulary, config and data (tests/albert_tf/test_preemption.py's
    `_finetune_flags(root, other_output_dir)` reruns the same command elsewhere), "model": the output folder}.
    Read only: the tests that use it export it or compare with it.
    """
    import subprocess
    import sys

    from tests.albert_tf.test_preemption import _finetune_flags

    def build(root):
        script = os.path.join(os.path.dirname(sys.executable), "albert-finetune")
        done = subprocess.run([script, *_finetune_flags(root, os.path.join(root, "model"))],
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    root = build_once(tmp_path_factory, "finetuned_sst2", build)
    return {"root": root, "model": os.path.join(root, "model")}
