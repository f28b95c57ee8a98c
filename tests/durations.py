"""The suite's CPU time per test file: print it, check it against tests/durations.json, or rewrite that file.

tests/cpu_times.py (a pytest plugin) makes every pytest process write ``cpu-<worker>.json`` into the folder named by
``ALBERT_TF_CPU_TIMES``. This module merges those records and compares them with the durations file kept in the repo:
a file whose CPU time grew by more than 50% (and by more than a few seconds, below which a file's time is noise)
is named, so that a slow new test is a decision (rewrite the durations file in the same commit) and not an accident.

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
from typing import Dict, List, Tuple

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
    recorded = load_durations(path).get("environments", {}).get(environment, {}).get("files", {})
    print(table(merged, recorded))
    if not recorded:
        print(f"tests/durations.json holds no record of the {environment} environment: nothing to compare "
              "(CONTRIBUTING.md says how to record one).")
        return 0
    factor = machine_factor(merged["files"], recorded)
    print(f"This machine takes {factor:.2f}x the recorded CPU time (median over the files): "
          "files are compared after that factor.")
    grown = grown_files(merged["files"], recorded, factor)
    if not grown:
        print(f"No test file grew by more than {GROWTH_LIMIT - 1:.0%} of its recorded CPU time "
              f"({environment} environment).")
        return 0
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


def update(folders, environment: str, path: str = DURATIONS_FILE) -> None:
    folders = [folders] if isinstance(folders, str) else list(folders)
    merged = highest_of_runs(folders)
    durations = load_durations(path)
    durations.setdefault("environments", {})[environment] = {
        "files": {name: round(seconds, 1) for name, seconds in sorted(merged["files"].items())},
        "tests": dict(sorted(merged["tests"].items())),
        "runs": len(folders),
    }
    durations["about"] = ("CPU seconds (user + system, the test process and the processes it waited for) per test "
                          "file, the highest of `runs` quiet runs of .ci/run; tests/durations.py checks CI against it.")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(durations, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"Wrote {len(merged['files'])} entries of the {environment} environment ({len(folders)} run(s)) to {path}.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.durations", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("check", "update"))
    parser.add_argument("folder", nargs="+", help="the folder ALBERT_TF_CPU_TIMES named for the pytest run "
                                                  "(update: several runs' folders, the highest time of each file kept)")
    parser.add_argument("--environment", default="main", help="main ([test,beam,serving]) or extras")
    parser.add_argument("--durations_file", default=DURATIONS_FILE)
    args = parser.parse_args(argv)
    if args.command == "update":
        update(args.folder, args.environment, args.durations_file)
        return 0
    if len(args.folder) != 1:
        parser.error("check takes one run's folder")
    return check(args.folder[0], args.environment, args.durations_file)


if __name__ == "__main__":
    sys.exit(main())
