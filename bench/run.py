"""The benchmark suite: `python -m bench.run [--quick]` (issues 10 and 18).

Measures, in one run, albert-tf against keras-hub (TensorFlow backend),
Hugging Face transformers (PyTorch), and OpenVINO and ONNX Runtime running
Hugging Face's AlbertModel exported to ONNX, and OpenVINO running our encoder
through our own export (`albert-export --format=openvino`), on ALBERT-base
built from the same config with random weights:

* training sequences/s (MLM + SOP, the MLM head on 20 masked positions for
  every system): ours through albert-pretrain's step and through
  `AlbertPretrainer.fit`, keras-hub's `AlbertMaskedLM.fit`, Hugging Face's
  AlbertForPreTraining (heads on the gathered positions), eager and through
  torch.compile; float32 and bfloat16, XLA on and off for the TensorFlow
  systems; 20 timed steps each;
* encoder inference sequences/s (batch 1, 8, 32 at length 128);
* raw-text inference on batches of real sentences of 5-60 words from a pool
  of thousands, through each system's own text path, in two comparisons:
  each system at its best normal use (length-grouped batches, each padding
  its own best way) and random batches as a server receives them (the peers
  padding each to its longest row; ours both with its length buckets or
  packed tokens and padded the same way); one-request latency of our SavedModel;
* fine-tuning on real text: training examples/s of a 2-label sentence
  classifier on the same pool, in the same two comparisons
  (`bench/systems/finetune.py`; `--smoke` runs it at a tiny shape);
* model FLOPs utilisation against the better of TensorFlow's and OpenVINO's
  matmul rates, measured in the same run;
* peak RSS of every process;
* ALBERT-large against BERT-large (training with LAMB state, same dropout).

Every measurement is a fresh process (`bench.worker`); repetitions are
interleaved (all configurations once, then again), and the tables show
medians over repetitions. Peers that are not installed (openvino,
onnxruntime: the [bench] extra) are listed as skipped. Results go to
bench/RESULTS.md (printed too) and bench/results/run.json (every repetition).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from typing import Dict, List, Optional, Sequence

from bench.systems import common
from bench.worker import RESULT_PREFIX

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)


@dataclasses.dataclass
class Measurement:
    """One configuration: which table it belongs to and what the worker runs."""

    group: str  # matmul, train, infer, text, finetune, large
    system: str  # the name shown in tables
    module: str  # bench.systems.<module>
    function: str
    kwargs: Dict[str, object]
    runs: List[dict] = dataclasses.field(default_factory=list)
    errors: List[str] = dataclasses.field(default_factory=list)
    skip: str = ""  # why it is not run (a peer not installed); shown in its row

    @property
    def key(self) -> str:
        settings = ",".join(f"{k}={v}" for k, v in sorted(self.kwargs.items())
                            if k not in ("sentences", "sentences_file", "pool_file", "spm_path", "warmup", "steps"))
        return f"{self.group}:{self.system}:{self.function}:{settings}"

    def spec(self) -> str:
        return json.dumps({"system": self.module, "function": self.function, "kwargs": self.kwargs})

    def median(self, field: str) -> Optional[float]:
        values = [r[field] for r in self.runs if r.get(field) is not None]
        return statistics.median(values) if values else None

    def maximum(self, field: str) -> Optional[float]:
        values = [r[field] for r in self.runs if r.get(field) is not None]
        return max(values) if values else None


# ------------------------------------------------------------------- plan
TF_SYSTEMS = {
    "albert-tf step": ("ours", "train_step"),
    "albert-tf fit": ("ours", "train_fit"),
    "keras-hub fit": ("kerashub", "train_fit"),
}
HF_COMPILED = "Hugging Face, torch.compile"
# At least 20 timed steps for every training figure (issue 18).
TRAIN_STEPS = dict(warmup=2, steps=20)
# The text and fine-tuning groups: batches of 32 from one pool of TEXT_POOL
# real sentences (`common.write_text_pool`): TEXT_STEPS timed batches after
# TEXT_WARMUP untimed ones, the same batches for every system.
TEXT_BATCH, TEXT_POOL = 32, 4096
TEXT_WARMUP, TEXT_STEPS = 2, {True: 10, False: 20}
# The two comparisons of every text and fine-tuning table (raw text: random batches as served,
# ours shown with and without its padding-free inference).
BEST_USE, SAME_PADDING = "each system at its best normal use", "same padding"
AS_SERVED = "random batches, as a server receives them"
OPENVINO, ONNXRUNTIME = "OpenVINO (HF model, ONNX)", "ONNX Runtime (HF model, ONNX)"
# The rows each runtime gets (module bench.systems.onnx_runtimes, the [bench] extra).
ONNX_RUNTIMES = {OPENVINO: ("openvino", ("bfloat16",)), ONNXRUNTIME: ("onnxruntime", ("float32", "int8"))}
# Our encoder through `albert-export --format=openvino`, compiled as the OpenVINO row (bench.systems.ours_openvino).
OURS_OPENVINO = "albert-tf (our OpenVINO export)"
OURS_OPENVINO_PADDED = "albert-tf (our OpenVINO export), padded"


def missing_package(name: str) -> str:
    """"" when `name` imports here, else the note a skipped row shows."""
    import importlib.util

    if importlib.util.find_spec(name) is not None:
        return ""
    return f"not installed: {name} (pip install -e '.[bench]')"


def plan(quick: bool, spm_path: str, pool_file: str, smoke: bool = False) -> List[Measurement]:
    """The configurations of a run; `quick` keeps it to about 15-25 minutes.

    pool_file: the pool of real sentences of the text and fine-tuning groups
    (`common.write_text_pool`); smoke: the fine-tuning group at a tiny shape.
    """
    out: List[Measurement] = _matmul_plan(quick)
    out += _train_plan(quick)
    out += _infer_plan(quick, spm_path)
    out += text_plan(spm_path, pool_file, quick)
    out += finetune_plan(spm_path, pool_file, smoke)
    out += _large(quick, 4 if quick else 8)
    return sorted(out, key=_priority) if quick else out


def _matmul_plan(quick: bool) -> List[Measurement]:
    from bench.systems.matmul import SHAPES

    out = []
    for precision in ("float32", "bfloat16"):
        for framework in ("tensorflow", "torch"):
            out.append(Measurement("matmul", framework, "matmul", f"{framework}_rates",
                                   {"precision": precision, "reps": 5 if quick else 8}))
        skip = missing_package("openvino")
        for m, k, n in SHAPES:
            out.append(Measurement("matmul", "openvino", "onnx_runtimes", "matmul",
                                   dict(precision=precision, m=m, k=k, n=n, warmup=1, steps=5 if quick else 8),
                                   skip=skip))
    return out


def _train_plan(quick: bool) -> List[Measurement]:
    out: List[Measurement] = []

    def train(system, precision, xla, batch, seq):
        if system.startswith("Hugging Face"):
            out.append(Measurement("train", system, "hf", "train",
                                   dict(precision=precision, batch=batch, seq=seq, compile=system == HF_COMPILED,
                                        **TRAIN_STEPS)))
            return
        module, function = TF_SYSTEMS[system]
        kwargs = dict(precision=precision, xla=xla, batch=batch, seq=seq, **TRAIN_STEPS)
        if function == "train_step":
            kwargs["preset"] = "albert_base_v2"
        out.append(Measurement("train", system, module, function, kwargs))

    torch_systems = ("Hugging Face", HF_COMPILED)
    if quick:
        for system, precision, xla in [
                ("albert-tf step", "bfloat16", False), ("albert-tf step", "float32", False),
                ("albert-tf step", "bfloat16", True), ("albert-tf fit", "bfloat16", False),
                ("keras-hub fit", "bfloat16", False), ("keras-hub fit", "float32", False),
                ("Hugging Face", "bfloat16", False), ("Hugging Face", "float32", False),
                (HF_COMPILED, "bfloat16", False)]:
            train(system, precision, xla, 8, 128)
        return out
    for system in (*TF_SYSTEMS, *torch_systems):
        for precision in ("float32", "bfloat16"):
            for xla in ((False,) if system in torch_systems else (False, True)):
                train(system, precision, xla, 8, 128)
    for system in (*TF_SYSTEMS, *torch_systems):
        train(system, "bfloat16", False, 32, 128)
    for system in ("albert-tf step", "keras-hub fit", "Hugging Face"):
        train(system, "bfloat16", False, 8, 512)
    return out


def _infer_plan(quick: bool, spm_path: str = "") -> List[Measurement]:
    """Encoder inference; spm_path: the text benchmarks' SentencePiece model (our OpenVINO export's ids
    model is written with it, padded to the vocabulary; "": the module trains its own)."""
    out: List[Measurement] = []
    infer_steps = dict(warmup=2, steps=5 if quick else 10)
    for batch in ((8, 32) if quick else (1, 8, 32)):
        for precision in ("float32", "bfloat16"):
            if quick and batch == 8 and precision == "float32":
                continue
            for xla in ((False,) if quick or batch != 32 else (False, True)):
                out.append(Measurement("infer", "albert-tf", "ours", "infer",
                                       dict(precision=precision, xla=xla, batch=batch, seq=128, **infer_steps)))
                if quick and (batch == 8 or precision == "float32"):
                    continue
                out.append(Measurement("infer", "keras-hub", "kerashub", "infer",
                                       dict(precision=precision, xla=xla, batch=batch, seq=128, **infer_steps)))
            if quick and batch == 8:
                continue
            out.append(Measurement("infer", "Hugging Face", "hf", "infer",
                                   dict(precision=precision, batch=batch, seq=128, **infer_steps)))
            if batch >= 16 and precision == "bfloat16":
                out.append(Measurement("infer", "albert-tf, buckets of 8 rows", "ours", "infer",
                                       dict(precision=precision, xla=False, batch=batch, seq=128,
                                            rows_per_bucket=8, **infer_steps)))
                # The graph albert-export serves: weights frozen into constants.
                out.append(Measurement("infer", "albert-tf, frozen weights (the exported graph)", "ours", "infer",
                                       dict(precision=precision, xla=False, batch=batch, seq=128, frozen=True,
                                            **infer_steps)))
        if batch == 1 or (quick and batch != 32):
            continue
        if batch == 32:
            out.append(Measurement("infer", OURS_OPENVINO, "ours_openvino", "infer",
                                   dict(precision="bfloat16", batch=batch, seq=128, hint="LATENCY", **infer_steps,
                                        **({"spm_path": spm_path} if spm_path else {})),
                                   skip=missing_package("openvino")))
        for system, (runtime, precisions) in ONNX_RUNTIMES.items():
            skip = missing_package(runtime)
            # LATENCY first: one synchronous batch gets every core (THROUGHPUT makes a stream per core, and
            # on 2 cores it measured 10.8 seq/s in bench.run against 22.2 for LATENCY run by hand:
            # bench/results/performance_notes.md).
            hints = ("LATENCY", "THROUGHPUT") if runtime == "openvino" and not quick else ("LATENCY",)
            for precision in precisions:
                for hint in (hints if runtime == "openvino" else (None,)):
                    extra = {"hint": hint} if hint else {}
                    out.append(Measurement("infer", system, "onnx_runtimes", "infer",
                                           dict(runtime=runtime, precision=precision, batch=batch, seq=128,
                                                **infer_steps, **extra), skip=skip))
    return out


def text_plan(spm_path: str, pool_file: str, quick: bool) -> List[Measurement]:
    """Raw-text inference: each system at its best normal use on length-grouped batches
    (ours: its in-graph buckets; keras-hub: pre-packed to the bucket's length; Hugging Face,
    the ONNX runtimes and our OpenVINO export's text model: padding to each batch's longest,
    ours with packed tokens), and on random batches as a server receives them: the peers padding
    each to its longest row, ours both at its normal use and padded the same way."""
    out: List[Measurement] = []
    steps = dict(warmup=TEXT_WARMUP, steps=TEXT_STEPS[quick])
    openvino_ours = missing_package("openvino") or missing_package("openvino_tokenizers")
    for feed in (common.GROUPED, common.RANDOM):
        best = feed == common.GROUPED
        kw = dict(spm_path=spm_path, pool_file=pool_file, feed=feed, **steps)
        for precision in (("bfloat16",) if quick else ("float32", "bfloat16")):
            out.append(Measurement("text", "albert-tf task model", "ours", "text", dict(precision=precision, **kw)))
            if not best:
                out.append(Measurement("text", "albert-tf task model, no buckets", "ours", "text",
                                       dict(precision=precision, one_padded_batch=True, **kw)))
            out.append(Measurement("text", "albert-tf SavedModel", "ours", "saved_model_text",
                                   dict(precision=precision, **kw)))
            out.append(Measurement("text", "keras-hub", "kerashub", "text",
                                   dict(precision=precision, padding="bucket" if best else "longest", **kw)))
            out.append(Measurement("text", "Hugging Face", "hf", "text", dict(precision=precision, **kw)))
        # The text model (tokenizer inside, padding to the longest row), compiled as the OpenVINO row.
        for system, pack in ((OURS_OPENVINO, True),) + (() if best else ((OURS_OPENVINO_PADDED, False),)):
            out.append(Measurement("text", system, "ours_openvino", "text",
                                   dict(precision="bfloat16", hint="LATENCY", **kw, **({} if pack else
                                                                                      {"pack_tokens": False})),
                                   skip=openvino_ours))
        for system, (runtime, precisions) in ONNX_RUNTIMES.items():
            for precision in (precisions if best else precisions[:1]):
                extra = {"hint": "LATENCY"} if runtime == "openvino" else {}
                out.append(Measurement("text", system, "hf", "onnx_text",
                                       dict(runtime=runtime, precision=precision, **kw, **extra),
                                       skip=missing_package(runtime)))
    return out


def pads_like_peers(m: Measurement) -> bool:
    """Whether our raw-text row pads each batch to its longest row as the peers do (no buckets, no packing)."""
    return bool(m.kwargs.get("one_padded_batch")) or m.kwargs.get("pack_tokens") is False


def comparison(m: Measurement) -> str:
    """BEST_USE, or for random batches SAME_PADDING (fine-tuning) or AS_SERVED (raw text):
    which table of its group a text or fine-tuning row is in."""
    order = m.kwargs.get("feed") if m.group == "text" else m.kwargs.get("order")
    if order != common.RANDOM:
        return BEST_USE
    return AS_SERVED if m.group == "text" else SAME_PADDING


def _priority(m: Measurement) -> int:
    """--quick runs the comparisons that matter most first (see --budget_minutes):
    each system's training in bfloat16, raw text, inference, then the rest."""
    bf16 = m.kwargs.get("precision") == "bfloat16" and not m.kwargs.get("xla")
    order = [m.group == "matmul" and m.system == "tensorflow",
             m.group == "matmul" and m.system == "openvino" and m.kwargs.get("m") == 4096,
             m.group == "train" and bf16 and m.system != "albert-tf fit",
             m.group == "text",
             m.group == "infer" and m.kwargs.get("batch") == 32 and bf16,
             m.group == "finetune",
             m.group == "train" and m.system != "albert-tf fit",
             m.group == "infer",
             m.group == "train",
             m.group == "matmul",
             True]
    return order.index(True)


# Fine-tuning: the text pool's batches of 32, FINETUNE_WARMUP untimed then
# FINETUNE_STEPS timed (the smoke run: 1 and 2).
FINETUNE_BATCH, FINETUNE_STEPS, FINETUNE_WARMUP = TEXT_BATCH, 20, 1
# ours with albert-finetune's feed (its own length-grouped batches) and with plain fit.
FINETUNE_BUCKETED = "albert-tf, albert-finetune's batches"
FINETUNE_SYSTEMS = [
    # best normal use: length-grouped batches for everyone (ours also with albert-finetune's own)
    (FINETUNE_BUCKETED, "ours", dict(feed="finetune", order=common.GROUPED)),
    ("albert-tf fit", "ours", dict(feed="fit", order=common.GROUPED)),
    ("keras-hub fit", "kerashub", dict(order=common.GROUPED, padding="bucket")),
    ("Hugging Face", "hf", dict(order=common.GROUPED)),
    # same padding: the same random batches, each padded to its longest row
    ("albert-tf fit", "ours", dict(feed="fit", order=common.RANDOM)),
    ("keras-hub fit", "kerashub", dict(order=common.RANDOM, padding="longest")),
    ("Hugging Face", "hf", dict(order=common.RANDOM)),
]


def finetune_plan(spm_path: str, pool_file: str, smoke: bool = False) -> List[Measurement]:
    """The fine-tuning group: each system in both comparisons, mixed bfloat16 (bench/systems/finetune.py)."""
    steps = dict(warmup=1, steps=2) if smoke else dict(warmup=FINETUNE_WARMUP, steps=FINETUNE_STEPS)
    return [Measurement("finetune", system, "finetune", function,
                        dict(precision="bfloat16", spm_path=spm_path, pool_file=pool_file,
                             batch=FINETUNE_BATCH, shape="tiny" if smoke else "base", **steps, **extra))
            for system, function, extra in FINETUNE_SYSTEMS]


# The preset dropout of bert_large is 0.1 and albert_large_v2's 0.0: both run at
# LARGE_DROPOUT, so the two do the same work.
LARGE_DROPOUT = 0.0


def _large(quick: bool, large_batch: int) -> List[Measurement]:
    out = []
    for preset in ("albert_large_v2", "bert_large"):
        for precision in (("float32",) if quick else ("float32", "bfloat16")):
            out.append(Measurement("large", preset, "ours", "train_step",
                                   dict(preset=preset, precision=precision, xla=False, batch=large_batch,
                                        seq=128, dropout=LARGE_DROPOUT, optimizer_alone=True, **TRAIN_STEPS)))
    return out


# ---------------------------------------------------------------- running
def run_one(m: Measurement, timeout: float, python: str) -> None:
    """Runs m in a fresh process and appends its result (or error) to m."""
    env = dict(os.environ, PYTHONPATH=REPO_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([python, "-m", "bench.worker", m.spec()], cwd=REPO_DIR, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        m.errors.append(f"timed out after {timeout:.0f} s")
        return
    lines = [l for l in proc.stdout.splitlines() if l.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        m.errors.append(f"exit {proc.returncode}: {tail[0][:300]}")
        return
    m.runs.append(json.loads(lines[-1][len(RESULT_PREFIX):]))


def run_all(measurements: List[Measurement], reps: int, timeout: float, python: str,
            log=print, budget_s: Optional[float] = None, after_each=None) -> None:
    """Interleaved: every configuration once, then again, `reps` times.

    With budget_s, no measurement starts once that many seconds have passed
    (the rest are reported as not run); after_each() runs after every one.
    """
    began = time.perf_counter()
    for rep in range(reps):
        for i, m in enumerate(measurements):
            if m.skip:
                if rep == 0:
                    log(f"{m.key}: skipped ({m.skip})")
                continue
            if budget_s is not None and time.perf_counter() - began > budget_s:
                log(f"budget of {budget_s / 60:.0f} minutes spent: {m.key} and later not run")
                return
            start = time.perf_counter()
            run_one(m, timeout, python)
            got = m.runs[-1] if len(m.runs) > rep else None
            summary = (f"{got.get('per_s', 0):.2f}/s" if got and "per_s" in got
                       else ("ok" if got else m.errors[-1]))
            log(f"[rep {rep + 1}/{reps} {i + 1}/{len(measurements)}] {m.key}: {summary} "
                f"({time.perf_counter() - start:.0f} s)")
            if after_each is not None:
                after_each()


# ---------------------------------------------------------------- tables
# The frameworks whose matmul rate is the MFU limit (torch's is shown, not used).
LIMIT_FRAMEWORKS = ("tensorflow", "openvino")


def matmul_rates(measurements: Sequence[Measurement]) -> Dict[tuple, Dict[str, float]]:
    """{(framework (kernel), precision): {shape: best GFLOP/s over repetitions}}."""
    rates: Dict[tuple, Dict[str, float]] = {}
    for m in measurements:
        if m.group != "matmul":
            continue
        for r in m.runs:
            for key, value in r.items():
                kernel, _, shape = key.partition(" ")
                if shape and "x" in shape and isinstance(value, (int, float)):
                    row = rates.setdefault((f"{m.system} ({kernel})", m.kwargs["precision"]), {})
                    row[shape] = max(row.get(shape, 0.0), float(value))
    return rates


def matmul_limits(measurements: Sequence[Measurement]) -> Dict[str, float]:
    """Best GFLOP/s per precision of TensorFlow and OpenVINO, over kernels and shapes."""
    limits: Dict[str, float] = {}
    for (name, precision), row in matmul_rates(measurements).items():
        if name.split()[0] in LIMIT_FRAMEWORKS and row:
            limits[precision] = max(limits.get(precision, 0.0), max(row.values()))
    return limits


def _fmt(x: Optional[float], digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _setting(m: Measurement) -> str:
    parts = [str(m.kwargs["precision"])]
    if "xla" in m.kwargs:
        parts.append("XLA" if m.kwargs["xla"] else "no XLA")
    return ", ".join(parts)


def _spread(m: Measurement) -> str:
    values = [r["per_s"] for r in m.runs]
    return ", ".join(f"{v:.2f}" for v in values) if values else m.skip or "; ".join(m.errors) or "not run"


def _is_ours(system: str) -> bool:
    return system.startswith("albert-tf")


def _is_peer(system: str) -> bool:
    return not system.startswith("albert-tf")


def _ratio_lines(rows: Sequence[Measurement], what: str) -> List[str]:
    ours = [m for m in rows if _is_ours(m.system) and m.median("per_s")]
    peers = [m for m in rows if _is_peer(m.system) and m.median("per_s")]
    if not ours or not peers:
        return []
    best_ours = max(ours, key=lambda m: m.median("per_s"))
    lines = [f"Best of ours for {what}: {best_ours.system} ({_setting(best_ours)}) "
             f"{best_ours.median('per_s'):.2f}/s."]
    for name in sorted({m.system for m in peers}):
        best_peer = max((m for m in peers if m.system == name), key=lambda m: m.median("per_s"))
        lines.append(f"- vs {name}'s best ({_setting(best_peer)}, {best_peer.median('per_s'):.2f}/s): "
                     f"**{best_ours.median('per_s') / best_peer.median('per_s'):.2f}x**")
    return lines + [""]


def throughput_table(rows: Sequence[Measurement], flops_fn, limits: Dict[str, float],
                     unit: str) -> List[str]:
    lines = [f"| system | setting | batch | length | {unit} (median) | runs | MFU | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|"]
    for m in rows:
        per_s = m.median("per_s")
        limit = limits.get(str(m.kwargs["precision"]))
        mfu = (f"{100 * per_s * flops_fn(m) / 1e9 / limit:.0f}%" if per_s and limit else "n/a")
        lines.append(f"| {m.system} | {_setting(m)} | {m.kwargs['batch']} | {m.kwargs['seq']} | "
                     f"{_fmt(per_s)} | {_spread(m)} | {mfu} | {_fmt(m.maximum('peak_rss_mb'), 0)} |")
    return lines + [""]


def versions() -> Dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in ("tensorflow", "tensorflow-text", "keras", "keras-hub", "torch", "transformers", "openvino",
                 "onnxruntime", "onnx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def render(measurements: Sequence[Measurement], header: Dict[str, object]) -> str:
    """RESULTS.md: machine, versions, command, then one table per measure."""
    limits = matmul_limits(measurements)
    group = lambda name: [m for m in measurements if m.group == name]  # noqa: E731
    lines = header_lines(header)
    lines += matmul_section(group("matmul"), limits)
    lines += train_section(group("train"), limits)
    lines += infer_section(group("infer"), limits)
    lines += text_section(group("text"))
    lines += finetune_section(group("finetune"))
    lines += large_section(group("large"))
    lines += ["## Data pipeline", "", header.get("data_note", ""), ""]
    return "\n".join(lines) + "\n"


def header_lines(header: Dict[str, object]) -> List[str]:
    cpu = header["cpu"]
    return [
        "# albert-tf benchmark results",
        "",
        f"Command: `{header['command']}` ({header['date']}, {header['minutes']:.0f} minutes).",
        "",
        f"Machine: {common.cpu_line(cpu)} (avx512_bf16: {'yes' if 'avx512_bf16' in cpu['flags'] else 'no'}.) "
        f"1-minute load average {header['load_start']:.2f} at the start, {header['load_end']:.2f} at the end"
        f", {header.get('load_max', header['load_end']):.2f} at most (a load above the {cpu['cores']} cores means "
        "other jobs were running and every figure is slowed; ratios measured under the same load remain "
        "comparable).",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in header["versions"].items()) + ".",
        "",
        f"Every figure is a fresh process; {header['reps']} interleaved repetition(s), tables show the median "
        "(and every run). ALBERT-base (H 768, E 128, 12 layers, V 30000), random weights, "
        f"{common.PREDICTIONS_PER_SEQ} masked positions; training uses LAMB (Hugging Face: torch AdamW, "
        "PyTorch has no LAMB) with global-norm clipping; keras-hub's AlbertMaskedLM has no SOP head. "
        "bfloat16 is Keras mixed_bfloat16 / torch.autocast (float32 weights). OpenVINO and ONNX Runtime run "
        "Hugging Face's AlbertModel exported to ONNX (`bench/systems/onnx_runtimes.py`); "
        f"{OURS_OPENVINO} is our encoder written by `albert-export --format=openvino` and run by OpenVINO with "
        "the same settings (`bench/systems/ours_openvino.py`).",
        "",
    ]


def matmul_section(rows: Sequence[Measurement], limits: Dict[str, float]) -> List[str]:
    from bench.systems.matmul import SHAPES

    shapes = [f"{m}x{k}x{n}" for m, k, n in SHAPES]
    lines = ["## Matmul limit (GFLOP/s, best of repetitions)", "",
             "| framework | precision | " + " | ".join(shapes) + " |", "|---|---|" + "---|" * len(shapes)]
    for (name, precision), rates in matmul_rates(rows).items():
        lines.append(f"| {name} | {precision} | " + " | ".join(_fmt(rates.get(s), 0) for s in shapes) + " |")
    for m in rows:
        if not m.runs and (m.skip or m.errors):
            lines.append(f"| {m.system} | {m.kwargs['precision']} | {m.skip or '; '.join(m.errors)} |"
                         + " |" * (len(shapes) - 1))
    return lines + ["", "Limit used for MFU: " + ", ".join(f"{p} {v:.0f} GFLOP/s" for p, v in sorted(limits.items()))
                    + " (the better of TensorFlow's and OpenVINO's rates, over their kernels and shapes).", ""]


def train_section(train: Sequence[Measurement], limits: Dict[str, float]) -> List[str]:
    base = common.model_shape("albert_base_v2")
    lines = ["## Training throughput (sequences/s)", "",
             f"Training FLOPs per sequence: {common.training_flops(base, 128, 20) / 1e9:.1f} G at length 128, "
             f"{common.training_flops(base, 512, 20) / 1e9:.1f} G at 512 (3 x forward matmuls). Every system runs "
             f"the MLM head on the {common.PREDICTIONS_PER_SEQ} masked positions only: ours and keras-hub gather "
             "them before the head; Hugging Face runs AlbertForPreTraining's encoder, then its MLM head "
             "(`model.predictions`) on the gathered positions and its SOP head, with the loss computed as ours "
             "(`hf.masked_pretraining_loss`; its own `forward(labels=...)` would run the head on every position). "
             f"{HF_COMPILED}: the same loss function through `torch.compile` (inductor). "
             f"{TRAIN_STEPS['steps']} timed steps after {TRAIN_STEPS['warmup']} untimed ones; the median step.", ""]
    lines += throughput_table(train, lambda m: common.training_flops(base, m.kwargs["seq"], 20), limits, "seq/s")
    for batch, seq in sorted({(m.kwargs["batch"], m.kwargs["seq"]) for m in train}):
        lines += _ratio_lines([m for m in train if (m.kwargs["batch"], m.kwargs["seq"]) == (batch, seq)],
                              f"training at batch {batch}, length {seq}")
    return lines


def infer_section(infer: Sequence[Measurement], limits: Dict[str, float]) -> List[str]:
    base = common.model_shape("albert_base_v2")
    lines = ["## Encoder inference (sequences/s, pooled output)", "",
             f"Forward FLOPs per sequence at length 128: {common.forward_flops(base, 128, None) / 1e9:.1f} G. "
             "OpenVINO: INFERENCE_PRECISION_HINT bf16 and the PERFORMANCE_HINT shown; ONNX Runtime: default "
             "session options, float32 and int8 (dynamic quantization). MFU against the same precision's limit "
             "(none for int8).", ""]
    lines += throughput_table(infer, lambda m: common.forward_flops(base, m.kwargs["seq"], None), limits, "seq/s")
    for batch in sorted({m.kwargs["batch"] for m in infer}):
        lines += _ratio_lines([m for m in infer if m.kwargs["batch"] == batch], f"inference at batch {batch}")
    return lines + check_lines(infer)


# The output checks' keys and what each compares against (onnx_runtimes.compare_outputs).
CHECKS = (("max_diff_vs_hf", "Hugging Face torch (float32)"), ("max_diff_vs_keras", "our Keras encoder (float32)"))


def check_lines(rows: Sequence[Measurement]) -> List[str]:
    """One line per reference: each checked row's largest output difference on one padded batch."""
    lines = []
    for key, reference in CHECKS:
        checks = [m for m in rows if any(key in r for r in m.runs)]
        if checks:
            lines += [f"Outputs against {reference} on one padded batch: " + "; ".join(
                f"{m.system} {m.kwargs['precision']}: {_check_text(m, key)}" for m in checks) + ".", ""]
    return lines


def _check_text(m: Measurement, key: str) -> str:
    if any(r.get("same_tokens") is False for r in m.runs):
        return "OTHER TOKENS than our TensorFlow preprocessor"
    diff = m.median(key)
    return ("largest difference " + ("n/a" if diff is None else f"{diff:.3g}")
            + ("" if all(r.get("within_bf16_tolerance") for r in m.runs) else " (OUTSIDE bf16 tolerance)"))


def text_section(text: Sequence[Measurement]) -> List[str]:
    if not text:
        return []
    first = text[0].kwargs
    lines = [f"## Raw-text inference (sentences/s, batches of {TEXT_BATCH} real sentences of 5-60 words)", "",
             f"A pool of {TEXT_POOL} real sentences (`common.write_text_pool`); every system gets the same "
             f"batches: {first['warmup']} untimed, then {first['steps']} timed as one pass (sentences / seconds of "
             "the pass). Tokenization is inside the timed call. Two comparisons, each its own table:", "",
             f"- **{BEST_USE}**: length-grouped batches (Hugging Face's `group_by_length` sampler, "
             "`common.length_grouped_batches`); ours: the task model's in-graph preprocessor (pads to the "
             "batch's longest) with its length buckets of rows, and the exported SavedModel (`serving_default`); "
             "keras-hub: AlbertTokenizer + AlbertTextClassifierPreprocessor, pre-packed to the bucket's length "
             f"(the batch's longest rounded up to a multiple of {common.BUCKET_STEP}) + backbone; Hugging Face "
             "and the ONNX runtimes: AlbertTokenizer (Rust, from spiece.model; padding='longest') + the model; "
             f"{OURS_OPENVINO}: our encoder's text model from `albert-export --format=openvino` (openvino-tokenizers "
             "inside, padding to the batch's longest, its dense layers on the real tokens only: packed tokens), "
             "compiled as the OpenVINO row.",
             f"- **{AS_SERVED}**: the same random batches for every system, as requests arrive at a server. The "
             "peers pad each batch to its longest row (keras-hub packed to that length). Ours is shown both ways: "
             "at its normal use (the task model and SavedModel with their length buckets of rows, our OpenVINO "
             f"export with packed tokens) and padding as the peers do (\"no buckets\", \"{OURS_OPENVINO_PADDED}\"), "
             "each with its ratios. \"padded tokens/sentence\" is the batches' padded length, not the work of "
             "buckets or packed tokens.", ""]
    for name in (BEST_USE, AS_SERVED):
        rows = [m for m in text if comparison(m) == name]
        if not rows:
            continue
        lines += [f"### {name[0].upper() + name[1:]}", "",
                  "| system | precision | sentences/s (median) | runs | padded tokens/sentence | "
                  "real tokens/sentence | one-request latency ms (median / p90) | peak RSS MB |",
                  "|---|---|---|---|---|---|---|---|"]
        for m in rows:
            lat = (f"{m.median('latency_ms_median'):.0f} / {m.median('latency_ms_p90'):.0f}"
                   if m.median("latency_ms_median") else "")
            lines.append(f"| {m.system} | {m.kwargs['precision']} | {_fmt(m.median('per_s'))} | {_spread(m)} | "
                         f"{_fmt(m.median('padded_tokens'), 1)} | {_fmt(m.median('real_tokens'), 1)} | {lat} | "
                         f"{_fmt(m.maximum('peak_rss_mb'), 0)} |")
        lines += [""] + _ratio_lines(rows, f"raw text, {name}")
        if name == AS_SERVED:
            padded = [m for m in rows if not _is_ours(m.system) or pads_like_peers(m)]
            lines += _ratio_lines(padded, f"raw text, {name}, ours padding as the peers (same padding)")
    return lines + check_lines(text)


def _paired_ratios(a: Measurement, b: Measurement) -> List[float]:
    """a / b per repetition, where both ran (runs are in repetition order unless one failed)."""
    if a.errors or b.errors:
        return []
    return [x["per_s"] / y["per_s"] for x, y in zip(a.runs, b.runs)]


def finetune_section(rows: Sequence[Measurement]) -> List[str]:
    """The fine-tuning tables (best normal use, same padding), ours against each peer."""
    if not rows:
        return []
    kw = rows[0].kwargs
    lines = [f"## Fine-tuning on real text (2-label sentence classification, batch {kw['batch']}, "
             "training examples/s)", "",
             f"ALBERT-{kw.get('shape', 'base')} shape, random weights, mixed bfloat16, random labels. Batches "
             f"from the pool of {TEXT_POOL} real sentences (as the raw-text tables): {kw['warmup']} untimed, "
             f"then {kw['steps']} timed as one pass (examples / seconds of the pass), the same batches for every "
             "system in each table. Ours: `AlbertClassifier` (in-graph preprocessor, pads to the batch's "
             "longest) + `albert_tf.optimizers.adamw`, `model.fit`; also fed as albert-finetune feeds it "
             "(its own batches of similar length, `ClassificationTask.train_dataset` over the pool); keras-hub: "
             "`AlbertTextClassifier`, inputs from `AlbertTextClassifierPreprocessor` in the tf.data pipeline, "
             f"Keras AdamW, `fit`; Hugging Face: `AlbertForSequenceClassification`, AlbertTokenizer "
             "(padding='longest') in every step, torch AdamW, `torch.autocast`.", "",
             f"- **{BEST_USE}**: length-grouped batches (`group_by_length`'s sampler) for every system; keras-hub "
             f"pre-packed to the bucket's length (a multiple of {common.BUCKET_STEP}).",
             f"- **{SAME_PADDING}**: the same random batches, each padded to its longest row by every system.", "",
             "GFLOP/example: training matmuls at the padded lengths. Examples per CPU-second: the pass's examples "
             "over the CPU time of all the process's threads (steadier than wall time when other jobs share the "
             "cores).", ""]
    for name in (BEST_USE, SAME_PADDING):
        part = [m for m in rows if comparison(m) == name]
        if part:
            lines += [f"### {name[0].upper() + name[1:]}", ""] + _finetune_table(part, name)
    return lines


def _finetune_table(rows: Sequence[Measurement], name: str) -> List[str]:
    lines = ["| system | precision | examples/s (median) | runs | examples per CPU-s (median) | "
             "padded tokens/example | real tokens/example | train GFLOP/example | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in rows:
        lines.append(f"| {m.system} | {m.kwargs['precision']} | {_fmt(m.median('per_s'))} | {_spread(m)} | "
                     f"{_fmt(m.median('per_cpu_s'))} | "
                     f"{_fmt(m.median('padded_tokens'), 1)} | {_fmt(m.median('real_tokens'), 1)} | "
                     f"{_fmt(m.median('gflop_per_example'), 1)} | {_fmt(m.maximum('peak_rss_mb'), 0)} |")
    lines += [""] + _ratio_lines(rows, f"fine-tuning on real text, {name}")[:-1]
    ours = [m for m in rows if _is_ours(m.system) and m.median("per_s")]
    if ours:
        best = max(ours, key=lambda m: m.median("per_s"))
        for peer in (m for m in rows if _is_peer(m.system) and m.median("per_s")):
            paired = _paired_ratios(best, peer)
            if paired:
                lines.append(f"- {best.system} / {peer.system} in each repetition (side by side): "
                             + ", ".join(f"{r:.2f}x" for r in paired))
            if best.median("per_cpu_s") and peer.median("per_cpu_s"):
                lines.append(f"- {best.system} / {peer.system} per CPU-second (medians): "
                             f"**{best.median('per_cpu_s') / peer.median('per_cpu_s'):.2f}x**")
    return lines + [""]


def large_section(large: Sequence[Measurement]) -> List[str]:
    if not large:
        return []
    lines = ["## ALBERT-large vs BERT-large (training with LAMB state, length 128)", "",
             "albert-pretrain's step; `optimizer` is the LAMB update alone (zero gradients, the same "
             "memory traffic), so step = forward/backward (arithmetic) + update (parameter memory). Both models "
             f"train with dropout {large[0].kwargs.get('dropout', 'of their preset')} (the presets differ: "
             "albert_large_v2 0.0, bert_large 0.1), so they do the same work.", "",
             "| model | precision | batch | parameters | train FLOPs/seq | seq/s (median) | runs | "
             "step s | of which LAMB update s | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in large:
        shape = common.model_shape(m.system)
        lines.append(
            f"| {m.system} | {m.kwargs['precision']} | {m.kwargs['batch']} | "
            f"{_fmt((m.median('parameters') or 0) / 1e6, 1)} M | "
            f"{common.training_flops(shape, 128, 20) / 1e9:.0f} G | {_fmt(m.median('per_s'))} | {_spread(m)} | "
            f"{_fmt(m.median('step_s'))} | {_fmt(m.median('optimizer_s'))} | "
            f"{_fmt(m.maximum('peak_rss_mb'), 0)} |")
    return lines + [""] + large_summary(large)


def large_summary(large: Sequence[Measurement]) -> List[str]:
    """Which part of BERT-large's slowdown is arithmetic, which is memory."""
    lines = []
    for precision in sorted({m.kwargs["precision"] for m in large}):
        by = {m.system: m for m in large if m.kwargs["precision"] == precision and m.runs}
        if "albert_large_v2" not in by or "bert_large" not in by:
            continue
        a, b = by["albert_large_v2"], by["bert_large"]
        flop_ratio = (common.training_flops(common.model_shape("bert_large"), 128, 20)
                      / common.training_flops(common.model_shape("albert_large_v2"), 128, 20))
        speed = a.median("per_s") / b.median("per_s")
        a_compute = a.median("step_s") - a.median("optimizer_s")
        b_compute = b.median("step_s") - b.median("optimizer_s")
        lines.append(
            f"- {precision}: ALBERT-large trains **{speed:.2f}x** as fast as BERT-large "
            f"(peak RSS {a.maximum('peak_rss_mb'):.0f} vs {b.maximum('peak_rss_mb'):.0f} MB). Arithmetic "
            f"alone predicts {flop_ratio:.2f}x (BERT-large's E = H embedding and MLM head); forward/backward "
            f"time {b_compute:.2f} vs {a_compute:.2f} s per step ({b_compute / a_compute:.2f}x); the LAMB "
            f"update over {b.median('parameters') / 1e6:.0f} M vs {a.median('parameters') / 1e6:.0f} M weights "
            f"takes {b.median('optimizer_s'):.2f} vs {a.median('optimizer_s'):.2f} s: that part is memory "
            "traffic (weights, gradients, two slots), the rest of the gap is arithmetic and cache effects.")
    return lines + [""]


DATA_RESULT = os.path.join("bench", "results", "pretraining_data.md")


def data_note(run_data: bool, python: str) -> str:
    """The data pipeline's figure: rerun bench_pretraining_data.py or cite its result."""
    if run_data:
        subprocess.run([python, os.path.join(BENCH_DIR, "bench_pretraining_data.py"), "--repeats", "3"],
                       cwd=REPO_DIR, check=False)
    path = os.path.join(REPO_DIR, DATA_RESULT)
    if not os.path.exists(path):
        return "No data pipeline result yet: run `python bench/bench_pretraining_data.py`."
    with open(path, encoding="utf-8") as f:
        text = f.read()
    rows = [l for l in text.splitlines()
            if l.startswith("|") and ("instances/s" in l or "ratio" in l or "original" in l)]
    when = "measured in this run" if run_data else "cited from the last run of bench_pretraining_data.py"
    return (f"From `{DATA_RESULT}` ({when}; `--with_data` reruns it):\n\n| measure | median |\n|---|---|\n"
            + "\n".join(rows))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer configurations (about 10-15 minutes)")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default: 1 quick, 3 full)")
    parser.add_argument("--only", default="",
                        help="comma-separated groups: matmul,train,infer,text,finetune,large")
    parser.add_argument("--smoke", action="store_true",
                        help="the finetune group at a tiny model shape (checks every system runs, in seconds)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per measurement process")
    parser.add_argument("--with_data", action="store_true", help="rerun bench_pretraining_data.py")
    parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "albert-tf-bench"),
                        help="where the SentencePiece model for the text benchmarks is kept")
    parser.add_argument("--output", default=os.path.join(BENCH_DIR, "RESULTS.md"))
    parser.add_argument("--run_json", default=os.path.join(BENCH_DIR, "results", "run.json"),
                        help="where every repetition's raw result is saved")
    parser.add_argument("--dry_run", action="store_true", help="list the plan and exit")
    parser.add_argument("--render_only", default="", help="rewrite RESULTS.md from a saved run.json")
    parser.add_argument("--budget_minutes", type=float, default=None,
                        help="start no measurement after this long (the plan runs in priority order)")
    parser.add_argument("--priorities", type=int, default=None,
                        help="run only the first N priority classes of the plan (each repeated --reps times): "
                             "1 TensorFlow's matmul limit, 2 OpenVINO's, 3 bf16 training, 4 raw text, 5 bf16 "
                             "inference at batch 32, 6 fine-tuning, then the rest")
    args = parser.parse_args(argv)
    reps = args.reps or (1 if args.quick else 3)
    python = sys.executable

    spm_path = common.spm_model(args.cache_dir)
    pool_file = common.write_text_pool(os.path.join(args.cache_dir, f"text_pool_{TEXT_POOL}_b{TEXT_BATCH}.json"),
                                       spm_path, TEXT_POOL, TEXT_BATCH)
    measurements = plan(args.quick, spm_path, pool_file, args.smoke)
    measurements = select(measurements, args.only, args.priorities)
    if args.dry_run:
        for m in measurements:
            print(m.key)
        return 0

    if args.render_only:
        with open(args.render_only, encoding="utf-8") as f:
            saved = json.load(f)
        measurements = [Measurement(**m) for m in saved["measurements"]]
        header = saved["header"]
        header["data_note"] = data_note(args.with_data, python)
        return _write(render(measurements, header), args.output)

    start, load_start = time.time(), os.getloadavg()[0]
    loads = [load_start]
    raw = args.run_json

    def header():
        return dict(
            command="python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:]),
            date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            minutes=(time.time() - start) / 60, load_start=load_start, load_end=os.getloadavg()[0],
            load_max=max(loads), cpu=common.cpu_description(), versions=versions(), reps=reps)

    def save():
        # The raw results after every measurement: a table can be rendered
        # from them (--render_only) even if the run is cut short.
        loads.append(os.getloadavg()[0])
        with open(raw + ".tmp", "w", encoding="utf-8") as f:
            f.write(portable_json({"header": header(), "measurements": [dataclasses.asdict(m) for m in measurements]},
                                  args.cache_dir))
        os.replace(raw + ".tmp", raw)

    run_all(measurements, reps, args.timeout, python,
            budget_s=args.budget_minutes * 60 if args.budget_minutes else None, after_each=save)
    save()
    final = dict(header(), data_note=data_note(args.with_data, python))
    return _write(render(measurements, final), args.output)


def select(measurements: Sequence[Measurement], only: str = "", priorities: Optional[int] = None) -> List[Measurement]:
    """The measurements of the groups in `only` (comma-separated; empty: all) whose priority
    class (`_priority`) is below `priorities` (None: all), in the plan's order."""
    groups = set(only.split(",")) if only else None
    return [m for m in measurements if (groups is None or m.group in groups)
            and (priorities is None or _priority(m) < priorities)]


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


def _write(text: str, path: str) -> int:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
