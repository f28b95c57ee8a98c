"""What the extras environment still has to run after the main run: the main run's skips that it has not run.

`.ci/run` runs the files of tests/extras_files.txt in the extras environment beside the main run, which leaves them
out. Any other test that skips in the main run (a new test needing an extra, in a file not on the list) is in the
main run's skip log (tests/conftest.py, ``ALBERT_TF_SKIP_LOG``) and must still run in the extras environment; the
early run's passed tests are in its run log (``ALBERT_TF_RAN_LOG``). Entries are pytest node ids, or a module's
path when the whole module skipped at import.

Usage::

    python -m tests.skip_log remainder <skip log> <run log> <out>   # writes the entries still to run; prints them
    python -m tests.skip_log files                                  # the extras files, one a line (for .ci/run)
"""

import os
import sys
from typing import Iterable, List

EXTRAS_FILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extras_files.txt")


def extras_files(path: str = EXTRAS_FILES) -> List[str]:
    """The test files listed in tests/extras_files.txt (comments and blank lines left out)."""
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]


def remainder(skipped: Iterable[str], ran: Iterable[str]) -> List[str]:
    """The skipped entries that no test of `ran` covers, in their order, each once.

    A node id is covered when it ran; a module's path when some test of that module ran (a module skipped at
    import has no test of its own in the skip log).

    >>> remainder(["t/a.py::x", "t/b.py", "t/c.py::y[1]", "t/d.py"], ["t/a.py::x", "t/b.py::z", "t/c.py::y[2]"])
    ['t/c.py::y[1]', 't/d.py']
    """
    ran = set(ran)
    modules = {node.split("::", 1)[0] for node in ran}
    left = []
    for entry in skipped:
        covered = entry in ran if "::" in entry else entry in modules
        if not covered and entry not in left:
            left.append(entry)
    return left


def _lines(path: str) -> List[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def main(argv: List[str]) -> int:
    if argv[:1] == ["files"]:
        print("\n".join(extras_files()))
        return 0
    if argv[:1] == ["remainder"] and len(argv) == 4:
        left = remainder(_lines(argv[1]), _lines(argv[2]))
        with open(argv[3], "w", encoding="utf-8") as f:
            f.writelines(f"{entry}\n" for entry in left)
        for entry in left:
            print(f"  {entry}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
