"""The benchmark suite: `python -m bench.run [--plan default|full|smoke]`.

Measures albert-tf against keras-hub (TensorFlow backend), Hugging Face transformers (PyTorch, eager and
torch.compile), and OpenVINO and ONNX Runtime running Hugging Face's AlbertModel exported to ONNX, with
our own OpenVINO export beside them, on ALBERT-base with random weights: training, full-length inference,
raw text, fine-tuning on real sentences, and the matmul limit the MFU column divides by
(`bench.plan` says what each plan holds; `bench.stats` the statistics; `bench/systems/` each system).

Every measurement is a fresh process (`bench.worker`) with every framework's threads set to --threads
(`bench.systems.threads`); repetitions are interleaved (all measurements once, then again, --reps times,
default 5). The run is saved after every measurement, so a run cut short (--budget_minutes, a crash)
still renders, marking what was not measured. Results: bench/results/<cpu-kind>.json (every repetition)
and .md (rendered from the JSON alone, `bench.report`), where <cpu-kind> comes from the CPU's flags
(`common.cpu_kind`: amx, avx512-bf16, ...). The smoke plan and --only runs go to the cache folder unless
--output is given, so they never replace a kind's current run.

    python -m bench.run                      # the default plan, 5 repetitions (about 70 minutes on 2 cores)
    python -m bench.run --plan smoke --reps 1
    python -m bench.run --plan levers        # XLA, oneDNN, both against neither (bench/results/<kind>-levers.md)
    python -m bench.run --render_only bench/results/amx.json
    python -m bench.run --extend bench/results/avx2.json --reps 1 --only train,infer   # more repetitions

--extend adds repetitions to a saved run, after its own, on the same machine: each extra repetition is again
every chosen measurement once (so its pairs still ran minutes apart), and the run file lists every
invocation with its command, date, code and load (`header["extensions"]`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from typing import Dict, List, Optional, Sequence

from bench import estimate
from bench import plan as P
from bench import report
from bench.plan import Measurement
from bench.systems import common, threads
from bench.worker import RESULT_PREFIX

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
# The environment variables that change what TensorFlow and the peers run, recorded with every run.
ENVIRONMENT = ("TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "OMP_NUM_THREADS", "KMP_AFFINITY", "ONEDNN_MAX_CPU_ISA",
               "DNNL_MAX_CPU_ISA", "CUDA_VISIBLE_DEVICES")


# ---------------------------------------------------------------- running
def run_one(m: Measurement, timeout: float, python: str, rep: int = 0, n_threads: Optional[int] = None) -> None:
    """Runs m in a fresh process with `n_threads` for every framework; appends its result (with "rep") or
    an error ("rep N: why") to m."""
    env = dict(os.environ, PYTHONPATH=REPO_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **threads.environment(n_threads or os.cpu_count() or 1))
    env.update(m.env)
    before, own_before = cpu_times(), children_cpu_s()
    try:
        proc = subprocess.run([python, "-m", "bench.worker", m.spec()], cwd=REPO_DIR, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        m.errors.append(f"rep {rep + 1}: timed out after {timeout:.0f} s")
        return
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        m.errors.append(f"rep {rep + 1}: exit {proc.returncode}: {tail[0][:300]}")
        return
    share = machine_share(before, cpu_times(), own_cpu_s=children_cpu_s() - own_before)
    m.runs.append(dict(json.loads(lines[-1][len(RESULT_PREFIX):]), rep=rep, **share))


def cpu_times() -> List[int]:
    """The machine's CPU time counters (/proc/stat's "cpu" line: user nice system idle iowait irq softirq
    steal ...), [] where there is none."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children and the descendants they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_share(before: Sequence[int], after: Sequence[int], own_cpu_s: Optional[float] = None,
                  ticks_per_s: Optional[int] = None) -> Dict[str, float]:
    """While a measurement ran: the share of all cores' time that was busy (any process, the measurement's
    own included), the share the hypervisor took (steal) and, given the measurement's own CPU seconds, the
    share that other processes took (`host_others`: busy minus the measurement's own; the load average
    cannot tell the two apart), from two `cpu_times` readings.

    >>> machine_share([100, 0, 0, 900, 0, 0, 0, 0], [250, 0, 50, 1000, 0, 0, 0, 100])
    {'host_busy': 0.5, 'host_steal': 0.25}
    >>> machine_share([100, 0, 0, 900, 0, 0, 0, 0], [250, 0, 50, 1000, 0, 0, 0, 100], own_cpu_s=1.5,
    ...               ticks_per_s=100)
    {'host_busy': 0.5, 'host_steal': 0.25, 'host_others': 0.125}
    """
    if len(before) < 8 or len(after) < 8:
        return {}
    delta = [b - a for a, b in zip(before[:8], after[:8])]
    total = sum(delta)
    if total <= 0:
        return {}
    idle = delta[3] + delta[4]
    share = {"host_busy": (total - idle - delta[7]) / total, "host_steal": delta[7] / total}
    if own_cpu_s is not None:
        ticks = ticks_per_s or os.sysconf("SC_CLK_TCK")  # /proc/stat counts in these ticks
        share["host_others"] = max(0.0, share["host_busy"] - own_cpu_s * ticks / total)
    return share


def run_all(measurements: List[Measurement], reps: int, timeout: float, python: str, log=print,
            budget_s: Optional[float] = None, after_each=None, n_threads: Optional[int] = None,
            first_rep: int = 0) -> str:
    """Interleaved: every measurement once, then again, `reps` times; after_each() after every one.

    With budget_s, no measurement starts once that many seconds have passed. Returns "" when everything
    ran, else why the run stopped (the missing repetitions are then listed by the run file). first_rep: the
    index of the first repetition (a saved run's count, when it is extended).
    """
    began = time.perf_counter()
    reps_total = first_rep + reps
    for rep in range(first_rep, reps_total):
        for i, m in enumerate(measurements):
            if m.skip:
                if rep == 0:
                    log(f"{m.key}: skipped ({m.skip})")
                continue
            if budget_s is not None and time.perf_counter() - began > budget_s:
                why = (f"budget of {budget_s / 60:.0f} minutes spent in repetition {rep + 1} of {reps_total}, before "
                       f"measurement {i + 1} of {len(measurements)}")
                log(why + ": the rest is not measured")
                return why
            start = time.perf_counter()
            run_one(m, timeout, python, rep, n_threads)
            got = m.runs[-1] if m.runs and m.runs[-1].get("rep") == rep else None
            summary = (f"{got['per_s']:.2f}/s" if got and "per_s" in got else "ok" if got else m.errors[-1])
            log(f"[rep {rep + 1}/{reps_total} {i + 1}/{len(measurements)}] {m.key}: {summary} "
                f"({time.perf_counter() - start:.0f} s)")
            if after_each is not None:
                after_each()
    return ""


# ---------------------------------------------------------------- saving
def code_version(repo: str = REPO_DIR) -> Dict[str, object]:
    """The git commit the run measured and whether the work tree differed from it (dirty: the changed paths,
    the first 20, run files left out since a run writes its own)."""
    def git(*args):
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=60).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
                   if not line[3:].startswith("bench/results/")]
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None, "changed": []}
    return {"commit": commit or "unknown", "dirty": bool(changed) if commit else None, "changed": changed[:20]}


def versions() -> Dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in ("tensorflow", "tensorflow-text", "keras", "keras-hub", "numpy", "torch", "transformers",
                 "openvino", "openvino-tokenizers", "onnxruntime", "onnx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def portable_json(data, cache_dir: str) -> str:
    """`data` as indented JSON with the cache folder written `<cache_dir>` (no machine path in saved results).

    >>> print(portable_json({"spm_path": "/scratch/bench/sp.model"}, "/scratch/bench/"))
    {
     "spm_path": "<cache_dir>/sp.model"
    }
    """
    text = json.dumps(data, indent=1, default=str)
    folder = json.dumps(os.path.normpath(cache_dir))[1:-1]  # as it appears inside a JSON string
    return text.replace(folder, "<cache_dir>")


def load(path: str):
    """(measurements, header) of a saved run; runs saved before repetitions were recorded count in order."""
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    fields = {f.name for f in dataclasses.fields(Measurement)}
    measurements = [Measurement(**{k: v for k, v in m.items() if k in fields}) for m in saved["measurements"]]
    for m in measurements:
        m.runs = [dict(r, rep=r.get("rep", i)) for i, r in enumerate(m.runs)]
    return measurements, saved["header"]


def _write(text: str, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def text_files(cache_dir: str):
    """(SentencePiece model, sentence pool) of the text and fine-tuning groups, made once in cache_dir."""
    spm_path = common.spm_model(cache_dir)
    pool = os.path.join(cache_dir, f"text_pool_{P.TEXT_POOL}_b{P.TEXT_BATCH}.json")
    return spm_path, common.write_text_pool(pool, spm_path, P.TEXT_POOL, P.TEXT_BATCH)


def default_output(plan_name: str, only: str, cache_dir: str, kind: str) -> str:
    """bench/results/<kind>.md for a whole default or full plan (<kind>-<plan>.md for the levers and serving
    plans); the cache folder for smoke or --only runs."""
    if plan_name in ("levers", "serving") and not only:
        return os.path.join(RESULTS_DIR, f"{kind}-{plan_name}.md")
    if plan_name == "smoke" or only:
        return os.path.join(cache_dir, f"{kind}-{plan_name}{'-' + only.replace(',', '-') if only else ''}.md")
    return os.path.join(RESULTS_DIR, f"{kind}.md")


# ------------------------------------------------------------------- main
def parse_args(argv: Optional[Sequence[str]]):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plan", choices=P.PLANS, default="default", help="what to measure (bench.plan)")
    parser.add_argument("--reps", type=int, default=None,
                        help=f"interleaved repetitions (default {P.DEFAULT_REPS}; smoke 1)")
    parser.add_argument("--only", default="", help="comma-separated groups: " + ",".join(P.GROUPS))
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads of every framework")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per measurement process")
    parser.add_argument("--budget_minutes", type=float, default=None,
                        help="start no measurement after this long; the rest is marked not measured")
    parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "albert-tf-bench"),
                        help="the SentencePiece model, the sentence pool and the exports (made once)")
    parser.add_argument("--output", default="", help="the run file (.md; the .json beside it); default: "
                        "bench/results/<cpu-kind>.md for a whole default or full plan")
    parser.add_argument("--precision", choices=("kind", "bfloat16", "float32"), default="kind",
                        help="the default, smoke and serving plans' precision; kind: bfloat16 on amx and avx512-bf16, "
                        "float32 elsewhere (bench.plan.kind_precision)")
    parser.add_argument("--dry_run", action="store_true", help="list the plan and its expected time, then exit")
    parser.add_argument("--extend", default="", help="a saved run's .json: add --reps repetitions to it (of the "
                        "--only groups), rendered to its .md")
    parser.add_argument("--fill", default="", help="with --extend: rerun the missing repetitions of the rows whose "
                        "key contains one of these comma-separated texts (no new repetition)")
    parser.add_argument("--render_only", default="", help="render a saved run's .json to its .md (or --output)")
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}.")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}.")
    unknown = set(filter(None, args.only.split(","))) - set(P.GROUPS)
    if unknown:
        parser.error(f"--only: unknown groups {sorted(unknown)}; expected some of {P.GROUPS}.")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.render_only:
        measurements, header = load(args.render_only)
        output = args.output or os.path.splitext(args.render_only)[0] + ".md"
        _write(report.render(measurements, header), output)
        print(f"wrote {output}")
        return 0
    if args.extend:
        return extend(args, argv)
    reps = args.reps or (1 if args.plan == "smoke" else P.DEFAULT_REPS)
    spm_path, pool_file = ("sp.model", "pool.json") if args.dry_run else text_files(args.cache_dir)
    groups = set(filter(None, args.only.split(",")))
    if groups:
        groups.add("matmul")  # the GEMM probe in every rerun: a control of the machine's state, and its MFU
    cpu = common.cpu_description()
    kind = common.cpu_kind(cpu)
    precision = P.kind_precision(kind) if args.precision == "kind" else args.precision
    measurements = [m for m in P.plan(args.plan, spm_path, pool_file, precision, kind)
                    if not groups or m.group in groups]
    expected = estimate.expected_minutes(measurements, reps)
    print(f"Plan {args.plan}: {len(measurements)} measurements x {reps} repetitions, about {expected:.0f} minutes "
          "on a 2-core AVX-512 BF16 CPU (bench.estimate, from earlier runs' wall times).", flush=True)
    if args.dry_run:
        for m in measurements:
            print(f"{estimate.expected_seconds(m):5.0f} s  {m.key}" + (f"  (skipped: {m.skip})" if m.skip else ""))
        return 0
    output = args.output or default_output(args.plan, args.only, args.cache_dir, kind)
    run_json = os.path.splitext(output)[0] + ".json"
    start, loads = time.time(), [os.getloadavg()[0]]
    header = dict(command="python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:]),
                  date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), plan=args.plan,
                  reps=reps, threads=args.threads, cpu=cpu, cpu_kind=kind, versions=versions(),
                  precision=precision if args.plan in ("default", "smoke", "serving") else "",
                  code=code_version(), environment={k: os.environ[k] for k in ENVIRONMENT if k in os.environ},
                  expected_minutes=expected, load_start=loads[0], stopped="")

    def save():
        loads.append(os.getloadavg()[0])
        header.update(minutes=(time.time() - start) / 60, load_end=loads[-1], load_max=max(loads))
        _write(portable_json({"header": header, "measurements": [dataclasses.asdict(m) for m in measurements]},
                             args.cache_dir), run_json)

    save()
    header["stopped"] = run_all(measurements, reps, args.timeout, sys.executable, after_each=save,
                                budget_s=args.budget_minutes * 60 if args.budget_minutes else None,
                                n_threads=args.threads)
    save()
    text = report.render(measurements, header)
    _write(text, output)
    print(text)
    print(f"wrote {output} and {run_json}")
    return 0


def _in_cache(measurements: List[Measurement], cache_dir: str) -> None:
    """A saved run's `<cache_dir>` paths (`portable_json`) pointed at this machine's cache folder, its text files
    made where missing (`text_files`, deterministic)."""
    text_files(cache_dir)
    folder = os.path.normpath(cache_dir)
    for m in measurements:
        m.kwargs = {k: v.replace("<cache_dir>", folder) if isinstance(v, str) else v for k, v in m.kwargs.items()}


def _missing_reps(m: Measurement, reps: int) -> List[int]:
    done = {int(r["rep"]) for r in m.runs}
    return [rep for rep in range(reps) if rep not in done]


def fill(measurements: List[Measurement], reps: int, keys: Sequence[str], timeout: float, python: str,
         n_threads: Optional[int], after_each=None, log=print) -> List[str]:
    """Reruns the missing repetitions (a failed or cut call) of the measurements whose key contains one of
    `keys`; returns "key rep N" of each rerun (the run file lists them: the rerun ran later than its pairs)."""
    out = []
    for m in measurements:
        if m.skip or not any(k in m.key for k in keys):
            continue
        for rep in _missing_reps(m, reps):
            m.errors = [e for e in m.errors if not e.startswith(f"rep {rep + 1}:")]
            run_one(m, timeout, python, rep, n_threads)
            log(f"[fill rep {rep + 1}] {m.key}: {m.errors[-1] if rep in _missing_reps(m, rep + 1) else 'ok'}")
            out.append(f"{m.key} rep {rep + 1}")
            if after_each is not None:
                after_each()
    return out


def extend(args, argv: Optional[Sequence[str]]) -> int:
    """--extend: more repetitions of a saved run (of the --only groups), on the machine it ran on; with --fill,
    the missing repetitions of the rows whose key contains a --fill text instead."""
    measurements, header = load(args.extend)
    _in_cache(measurements, args.cache_dir)
    cpu = common.cpu_description()
    if common.cpu_kind(cpu) != header.get("cpu_kind") or cpu.get("model") != header["cpu"].get("model"):
        raise SystemExit(f"--extend {args.extend}: it ran on a {header.get('cpu_kind')} CPU "
                         f"({header['cpu'].get('model')}); this is a {common.cpu_kind(cpu)} "
                         f"({cpu.get('model')}). Repetitions of one run come from one machine.")
    groups = set(filter(None, args.only.split(",")))
    chosen = [m for m in measurements if not groups or m.group in groups or m.group == "matmul"]
    done = int(header["reps"])
    reps = args.reps or 1
    start, loads = time.time(), [os.getloadavg()[0]]
    record = dict(command="python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:]),
                  date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  reps=reps, only=sorted(groups), code=code_version(), load_start=loads[0], stopped="")
    header.setdefault("extensions", []).append(record)
    header["reps"] = done + reps
    output = args.output or os.path.splitext(args.extend)[0] + ".md"

    def save():
        loads.append(os.getloadavg()[0])
        record.update(minutes=(time.time() - start) / 60, load_end=loads[-1], load_max=max(loads))
        _write(portable_json({"header": header, "measurements": [dataclasses.asdict(m) for m in measurements]},
                             args.cache_dir), args.extend)

    save()
    if args.fill:
        header["reps"] = done
        record.update(reps=0, filled=fill(measurements, done, args.fill.split(","), args.timeout, sys.executable,
                                          args.threads, after_each=save))
    else:
        record["stopped"] = run_all(chosen, reps, args.timeout, sys.executable, after_each=save, first_rep=done,
                                    budget_s=args.budget_minutes * 60 if args.budget_minutes else None,
                                    n_threads=args.threads)
    save()
    _write(report.render(measurements, header), output)
    print(f"wrote {output} and {args.extend}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
