"""Shared pytest configuration: quiet TensorFlow, fixed seeds, fixture paths, and CI's skip rules.

CI (.ci/run) runs the suite twice: once in the main environment ([test,beam]) and once in an environment with the
optional extras ([test,bench,openvino]: torch, transformers, OpenVINO, ONNX Runtime, keras-hub). Two environment
variables tie them together so that no test can go unrun by skipping:

- ``ALBERT_TF_SKIP_LOG=<file>``: every test or module that skips is written to <file>, one node id a line, in the
  form pytest reads back with ``pytest @<file>``.
- ``ALBERT_TF_NO_SKIPS=1``: any skip fails the run (the second environment reruns the first one's skips, and
  there nothing may skip: a missing package there is a broken install, not a reason).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


def pytest_sessionfinish(session, exitstatus):
    log = os.environ.get("ALBERT_TF_SKIP_LOG")
    if log:
        with open(log, "w", encoding="utf-8") as f:
            f.writelines(f"{nodeid}\n" for nodeid, _ in _SKIPPED)
    if os.environ.get("ALBERT_TF_NO_SKIPS") and _SKIPPED:
        lines = "\n".join(f"  {nodeid}: {reason}" for nodeid, reason in _SKIPPED)
        print(f"\nALBERT_TF_NO_SKIPS is set and {len(_SKIPPED)} test(s) skipped:\n{lines}")
        session.exitstatus = 1
