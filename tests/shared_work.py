"""Work that several test files need, done once per test run, even across pytest-xdist workers.

A session fixture runs once per pytest process, and under `pytest -n 2` there are two. `build_once` makes a folder
in the run's shared temporary root (the parent of every worker's basetemp) under a file lock: the first worker to
ask builds it, every later caller, in any worker, waits for it and reuses it. A build that fails leaves nothing
behind, so the next caller builds again and sees the same error.

Callers must treat the folder as read-only (copy it first to change it): other tests read it too.
"""

import fcntl
import os
import shutil
from typing import Callable

_COMPLETE = ".complete"


def build_once(tmp_path_factory, name: str, build: Callable[[str], None]) -> str:
    """The folder `name`, made by `build(folder)` once for the whole run; returns its path.

    Args:
      tmp_path_factory: pytest's session-scoped factory (its basetemp's parent is shared by the xdist workers).
      name: the folder's name, unique per kind of work.
      build: writes the work into the (empty, existing) folder it is given.
    """
    base = tmp_path_factory.getbasetemp()
    root = str(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)
    folder = os.path.join(root, "shared-" + name)
    with open(folder + ".lock", "w", encoding="ascii") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if os.path.exists(os.path.join(folder, _COMPLETE)):
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        try:
            build(folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        with open(os.path.join(folder, _COMPLETE), "w", encoding="ascii"):
            pass
    return folder
