"""The suite's CPU time per test file: print it, check it against tests/durations.json, or rewrite that file.

tests/cpu_times.py (a pytest plugin) makes every pytest process write ``cpu-<worker>.json`` into the folder named by
``ALBERT_TF_CPU_TIMES``. This module merges those records and compares them with the durations file kept in the repo:
a file whose CPU time grew by more than 50% (and by more than a few seconds, below which a file's time is noise)
is named, so that a slow new test is a decision (rewrite the durations file in the same commit) and not an accident.
Each environment also has a budget for its whole run (``budget_cpu_s``, at the recording machine's speed): many
files each a little slower, or many new small ones, pass the per-file rule but not the budget, and ``update``
refuses to record a suite over it unless the budget is raised in the same command (``--budget_cpu_s``).

Usage::

    python -m tests.durations check --environment main <folder>    # print the table, exit 1 on growth
    python -m tests.durations update --environment main <folder>...  # rewrite that environment in durations.json

CI (.ci/run) runs ``check`` after each pytest call; see CONTRIBUTING.md for updating the file.
"""

import argparse
import glob
import json
import os
import sys
from typing import Dict, List, Optional, Tuple

DURATIONS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
GROWTH_LIMIT = 1.5  # a file may take up to 50% more CPU time than recorded
NOISE_FLOOR_S = 15.0  # growth below this many CPU seconds is never reported (start-up noise, small files)


def merge_records(folder: str) -> Dict[str, Dict[str, float]]:
    """Sums the ``cpu-*.json`` records of one pytest run: {"files": {...}, "wall": {...}, "tests": {...}}."""
    merged = {"files": {}, "wall": {}, "tests": {}, "costliest_tests": {}}
    paths = sorted(glob.glob(os.path.join(folder, "cpu-*.json")))
    if not paths:
        raise SystemExit(f"tests.durations: no cpu-*.json in {folder!r}: was ALBERT_TF_CPU_TIMES set for pytest?")
    for path in paths:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
        for key in merged:
            for name, value in record.get(key, {}).items():
                merged[key][name] = merged[key].get(name, 0) + value
    return merged


def machine_factor(measured: Dict[str, float], recorded: Dict[str, float], floor_s: float = NOISE_FLOOR_S) -> float:
    """How much slower this machine runs the suite than the recording one: the median ratio over the files
    that both runs timed at `floor_s` or more (1.0 when there are none).

    The project's machines are of several CPU kinds (with AMX, with AVX-512 BF16, AVX2 only), and TensorFlow's
    speed differs between them for every file alike; a file is judged against the others, not against a clock.

    >>> machine_factor({"a": 30.0, "b": 40.0, "c": 100.0, "d": 5.0}, {"a": 20.0, "b": 20.0, "c": 50.0, "d": 1.0})
    2.0
    """
    ratios = sorted(measured[name] / recorded[name] for name in measured
                    if recorded.get(name, 0.0) >= floor_s and measured[name] >= floor_s)
    if not ratios:
        return 1.0
    middle = len(ratios) // 2
    return ratios[middle] if len(ratios) % 2 else 0.5 * (ratios[middle - 1] + ratios[middle])


def grown_files(measured: Dict[str, float], recorded: Dict[str, float], factor: float = 1.0,
                limit: float = GROWTH_LIMIT, floor_s: float = NOISE_FLOOR_S) -> List[Tuple[str, float, float]]:
    """(name, recorded, measured) for every file over `limit` x its record (scaled by the machine `factor`)
    and over it by more than `floor_s`.

    A file with no record counts as recorded at 0 s, so a new file is named once it costs more than `floor_s`.

    >>> grown_files({"a.py": 40.0, "b.py": 20.0, "c.py": 16.0, "d.py": 9.0}, {"a.py": 20.0, "b.py": 16.0})
    [('a.py', 20.0, 40.0), ('c.py', 0.0, 16.0)]
    >>> grown_files({"a.py": 40.0, "b.py": 20.0}, {"a.py": 20.0, "b.py": 16.0}, factor=2.0)
    []
    """
    grown = []
    for name, seconds in sorted(measured.items()):
        before = recorded.get(name, 0.0) * factor
        if seconds > limit * before and seconds - before > floor_s:
            grown.append((name, recorded.get(name, 0.0), seconds))
    return grown


def budget_problem(measured: Dict[str, float], factor: float, budget: float) -> str:
    """A line naming the overrun when the run's CPU time, at the recording machine's speed, exceeds `budget`
    ("" when it does not, or when there is no budget).

    >>> budget_problem({"a.py": 900.0, "b.py": 300.0}, 1.0, 1000.0)
    'the run took 1200 CPU-s at the recorded speed (1200 here / 1.00), over its budget of 1000 CPU-s'
    >>> budget_problem({"a.py": 900.0, "b.py": 300.0}, 1.5, 1000.0)
    ''
    """
    total = sum(measured.values())
    if not budget or total / factor <= budget:
        return ""
    return (f"the run took {total / factor:.0f} CPU-s at the recorded speed ({total:.0f} here / {factor:.2f}), "
            f"over its budget of {budget:.0f} CPU-s")


def load_durations(path: str = DURATIONS_FILE) -> dict:
    if not os.path.exists(path):
        return {"environments": {}}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def table(merged: Dict[str, Dict[str, float]], recorded: Dict[str, float], top: int = 25) -> str:
    """The `top` costliest files: CPU seconds now and as recorded, wall seconds and test count."""
    files = merged["files"]
    total = sum(files.values())
    lines = [f"CPU time by test file: {total:.0f} CPU-s in all, {sum(merged['tests'].values())} tests "
             f"(wall column: seconds inside that file's tests on its worker)",
             f"{'CPU-s':>8} {'recorded':>9} {'wall-s':>8} {'tests':>6}  file"]
    for name, seconds in sorted(files.items(), key=lambda kv: -kv[1])[:top]:
        before = recorded.get(name)
        lines.append(f"{seconds:8.1f} {before if before is not None else float('nan'):9.1f} "
                     f"{merged['wall'].get(name, 0.0):8.1f} {merged['tests'].get(name, 0):6d}  {name}")
    costliest = sorted(merged["costliest_tests"].items(), key=lambda kv: -kv[1])[:top]
    if costliest:
        lines.append(f"The {len(costliest)} costliest tests (CPU-s, set-up and tear-down included):")
        lines.extend(f"{seconds:8.1f}  {name}" for name, seconds in costliest)
    return "\n".join(lines)


def check(folder: str, environment: str, path: str = DURATIONS_FILE) -> int:
    merged = merge_records(folder)
    record = load_durations(path).get("environments", {}).get(environment, {})
    recorded = record.get("files", {})
    print(table(merged, recorded))
    if not recorded:
        print(f"tests/durations.json holds no record of the {environment} environment: nothing to compare "
              "(CONTRIBUTING.md says how to record one).")
        return 0
    factor = machine_factor(merged["files"], recorded)
    print(f"This machine takes {factor:.2f}x the recorded CPU time (median over the files): "
          "files are compared after that factor.")
    failed = 0
    overrun = budget_problem(merged["files"], factor, record.get("budget_cpu_s", 0.0))
    if overrun:
        print(f"\nThe {environment} environment's budget is spent: {overrun}. Make the suite cheaper, or raise "
              "the budget on purpose (CONTRIBUTING.md, 'Test durations') in the same commit.")
        failed = 1
    elif record.get("budget_cpu_s"):
        print(f"The run is within its budget of {record['budget_cpu_s']:.0f} CPU-s at the recorded speed "
              f"({sum(merged['files'].values()) / factor:.0f}).")
    grown = grown_files(merged["files"], recorded, factor)
    if not grown:
        print(f"No test file grew by more than {GROWTH_LIMIT - 1:.0%} of its recorded CPU time "
              f"({environment} environment).")
        return failed
    print(f"\nThese test files take more than {GROWTH_LIMIT - 1:.0%} (and {NOISE_FLOOR_S:.0f} s) more CPU time "
          f"than tests/durations.json records ({environment} environment):")
    for name, before, seconds in grown:
        print(f"  {name}: {before:.1f} CPU-s recorded ({before * factor:.1f} on this machine) -> {seconds:.1f}")
    print("Make them cheaper, or accept the cost on purpose: rewrite the durations file "
          "(CONTRIBUTING.md, 'Test durations') in the same commit.")
    return 1


def highest_of_runs(folders: List[str]) -> Dict[str, Dict[str, float]]:
    """Per file, the highest CPU time (and test count) over several runs' folders.

    A file's CPU time moves between quiet runs by up to about a third (XLA compilation, a worker's first use of
    a kernel), so the record keeps the highest seen: the check then names growth beyond that.
    """
    highest = {"files": {}, "tests": {}}
    for folder in folders:
        merged = merge_records(folder)
        for key in highest:
            for name, value in merged[key].items():
                highest[key][name] = max(highest[key].get(name, 0), value)
    return highest


def update(folders, environment: str, path: str = DURATIONS_FILE, budget_cpu_s: Optional[float] = None) -> None:
    """Rewrites `environment`'s record from the runs' folders (each file's highest time over them).

    The environment's budget is kept, or set to `budget_cpu_s`; a record whose total exceeds it is refused
    (SystemExit naming both), so that a slower suite is a decision written into the same commit.
    """
    folders = [folders] if isinstance(folders, str) else list(folders)
    merged = highest_of_runs(folders)
    durations = load_durations(path)
    budget = budget_cpu_s if budget_cpu_s is not None else (
        durations.get("environments", {}).get(environment, {}).get("budget_cpu_s"))
    total = sum(merged["files"].values())
    if budget and total > budget:
        raise SystemExit(f"tests.durations: the {environment} environment's files take {total:.0f} CPU-s, over its "
                         f"budget of {budget:.0f}: make the suite cheaper, or raise the budget on purpose with "
                         f"--budget_cpu_s (CONTRIBUTING.md). Nothing written.")
    durations.setdefault("environments", {})[environment] = {
        "files": {name: round(seconds, 1) for name, seconds in sorted(merged["files"].items())},
        "tests": dict(sorted(merged["tests"].items())),
        "runs": len(folders),
    }
    if budget:
        durations["environments"][environment]["budget_cpu_s"] = float(budget)
    durations["about"] = ("CPU seconds (user + system, the test process and the processes it waited for) per test "
                          "file, the highest of `runs` quiet runs of .ci/run, and each environment's budget for the "
                          "whole run at that speed; tests/durations.py checks CI against them.")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(durations, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"Wrote {len(merged['files'])} entries of the {environment} environment ({len(folders)} run(s), "
          f"{total:.0f} CPU-s of a budget of {budget or 0:.0f}) to {path}.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.durations", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("check", "update"))
    parser.add_argument("folder", nargs="+", help="the folder ALBERT_TF_CPU_TIMES named for the pytest run "
                                                  "(update: several runs' folders, the highest time of each file kept)")
    parser.add_argument("--environment", default="main", help="main ([test,beam,serving]) or extras")
    parser.add_argument("--durations_file", default=DURATIONS_FILE)
    parser.add_argument("--budget_cpu_s", type=float, default=None,
                        help="update: the environment's new budget for a whole run, in recorded CPU seconds")
    args = parser.parse_args(argv)
    if args.command == "update":
        update(args.folder, args.environment, args.durations_file, args.budget_cpu_s)
        return 0
    if len(args.folder) != 1:
        parser.error("check takes one run's folder")
    return check(args.folder[0], args.environment, args.durations_file)


if __name__ == "__main__":
    sys.exit(main())
