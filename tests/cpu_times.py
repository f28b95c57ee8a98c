"""Per-file CPU time of the test suite: a pytest plugin (loaded by tests/conftest.py).

CPU time, not wall time: on 2 shared cores the wall time of a file depends on what the other xdist worker runs
beside it, while the CPU seconds a file spends (this process plus every child process it waited for) barely move.
Each test's CPU time is charged to its file; a session-scoped fixture's set-up is charged to the fixture
("session fixture <name>"), since under xdist it is built by whichever file reaches it first.

With ``ALBERT_TF_CPU_TIMES=<folder>`` set, every pytest process (the controller and each xdist worker) writes
``<folder>/cpu-<worker>.json``: ``{"files": {path: cpu_s}, "wall": {path: wall_s}, "tests": {path: n},
"costliest_tests": {node id: cpu_s}}``.
`python -m tests.durations` merges them, prints the table and checks them against tests/durations.json.
"""

import json
import os
import resource
import time
from collections import defaultdict

import pytest

SESSION_FIXTURE_PREFIX = "session fixture "
COSTLIEST_TESTS = 40  # per process: the tests whose CPU seconds the record lists one by one


def cpu_seconds() -> float:
    """User + system seconds of this process and of the children it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuTimes:
    """Accumulates CPU and wall seconds per test file and per session fixture."""

    def __init__(self):
        self.cpu = defaultdict(float)
        self.wall = defaultdict(float)
        self.tests = defaultdict(int)
        self.by_test = {}  # node id -> CPU seconds (the costliest are kept in the record)
        self._fixture_depth = 0
        self._carved = 0.0  # session-fixture seconds inside the running test, charged to the fixture instead

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        if fixturedef.scope != "session" or self._fixture_depth:
            yield
            return
        self._fixture_depth += 1
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        try:
            yield
        finally:
            self._fixture_depth -= 1
            spent = cpu_seconds() - cpu0
            name = SESSION_FIXTURE_PREFIX + fixturedef.argname
            self.cpu[name] += spent
            self.wall[name] += time.monotonic() - wall0
            self.tests[name] += 1
            self._carved += spent

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        path = item.nodeid.split("::", 1)[0]
        self._carved = 0.0
        cpu0, wall0 = cpu_seconds(), time.monotonic()
        yield
        spent = cpu_seconds() - cpu0 - self._carved
        self.by_test[item.nodeid] = spent
        self.cpu[path] += spent
        self.wall[path] += time.monotonic() - wall0
        self.tests[path] += 1

    def pytest_sessionfinish(self, session):
        folder = os.environ.get("ALBERT_TF_CPU_TIMES")
        if not folder or not self.tests:
            return
        os.makedirs(folder, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        costliest = dict(sorted(self.by_test.items(), key=lambda kv: -kv[1])[:COSTLIEST_TESTS])
        record = {"files": dict(self.cpu), "wall": dict(self.wall), "tests": dict(self.tests),
                  "costliest_tests": costliest}
        with open(os.path.join(folder, f"cpu-{worker}.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1, sort_keys=True)
