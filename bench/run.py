"""The benchmark suite: `python -m bench.run [--quick]` (issue 10).

Measures, in one run, albert-tf against keras-hub (TensorFlow backend) and
Hugging Face transformers (PyTorch) on ALBERT-base built from the same
config with random weights:

* training sequences/s (MLM + SOP, 20 masked positions): ours through
  albert-pretrain's step and through `AlbertPretrainer.fit`, keras-hub's
  `AlbertMaskedLM.fit`, HF's `AlbertForPreTraining`; float32 and bfloat16,
  XLA on and off for the TensorFlow systems;
* encoder inference sequences/s (batch 1, 8, 32 at length 128);
* raw-text inference on 32 real sentences of 5-60 words through each
  system's own text path, and one-request latency of our SavedModel;
* fine-tuning on real text: training examples/s of a 2-label sentence
  classifier on batches of 32 real sentences, each system's own text path
  (`bench/systems/finetune.py`; `--smoke` runs it at a tiny shape);
* model FLOPs utilisation against matmul rates measured in the same run;
* peak RSS of every process;
* ALBERT-large against BERT-large (training with LAMB state).

Every measurement is a fresh process (`bench.worker`); repetitions are
interleaved (all configurations once, then again), and the tables show
medians over repetitions. Results go to bench/RESULTS.md (printed too) and
bench/results/run.json (every repetition).
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

    @property
    def key(self) -> str:
        settings = ",".join(f"{k}={v}" for k, v in sorted(self.kwargs.items())
                            if k not in ("sentences", "sentences_file", "spm_path", "warmup", "steps"))
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
# The classifier before length buckets: one batch padded to its longest row.
ONE_BATCH = "albert-tf task model, one padded batch"
TF_SYSTEMS = {
    "albert-tf step": ("ours", "train_step"),
    "albert-tf fit": ("ours", "train_fit"),
    "keras-hub fit": ("kerashub", "train_fit"),
}


def plan(quick: bool, spm_path: str, sentences: Sequence[str], finetune_sentences: str = "",
         smoke: bool = False) -> List[Measurement]:
    """The configurations of a run; `quick` keeps it to about 10-15 minutes.

    finetune_sentences: the JSON file of FINETUNE_POOL real sentences of the
    fine-tuning group; smoke: that group at a tiny shape (seconds).
    """
    out: List[Measurement] = []
    train_steps = dict(warmup=2, steps=3 if quick else 5)
    infer_steps = dict(warmup=2, steps=5 if quick else 10)
    for framework in ("tensorflow", "torch"):
        for precision in ("float32", "bfloat16"):
            out.append(Measurement("matmul", framework, "matmul", f"{framework}_rates",
                                   {"precision": precision, "reps": 5 if quick else 8}))

    def train(system, precision, xla, batch, seq):
        if system == "Hugging Face":
            out.append(Measurement("train", system, "hf", "train",
                                   dict(precision=precision, batch=batch, seq=seq, **train_steps)))
            return
        module, function = TF_SYSTEMS[system]
        kwargs = dict(precision=precision, xla=xla, batch=batch, seq=seq, **train_steps)
        if function == "train_step":
            kwargs["preset"] = "albert_base_v2"
        out.append(Measurement("train", system, module, function, kwargs))

    if quick:
        for system, precision, xla in [
                ("albert-tf step", "bfloat16", False), ("albert-tf step", "float32", False),
                ("albert-tf step", "bfloat16", True), ("albert-tf fit", "bfloat16", False),
                ("keras-hub fit", "bfloat16", False), ("keras-hub fit", "float32", False),
                ("Hugging Face", "bfloat16", False), ("Hugging Face", "float32", False)]:
            train(system, precision, xla, 8, 128)
    else:
        for system in (*TF_SYSTEMS, "Hugging Face"):
            for precision in ("float32", "bfloat16"):
                for xla in ((False,) if system == "Hugging Face" else (False, True)):
                    train(system, precision, xla, 8, 128)
        for system in (*TF_SYSTEMS, "Hugging Face"):
            train(system, "bfloat16", False, 32, 128)
        for system in ("albert-tf step", "keras-hub fit", "Hugging Face"):
            train(system, "bfloat16", False, 8, 512)

    infer_batches = (8, 32) if quick else (1, 8, 32)
    for batch in infer_batches:
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

    text_kwargs = dict(spm_path=spm_path, sentences=list(sentences), **infer_steps)
    for precision in (("bfloat16",) if quick else ("float32", "bfloat16")):
        out.append(Measurement("text", "albert-tf task model", "ours", "text",
                               dict(precision=precision, **text_kwargs)))
        out.append(Measurement("text", "albert-tf SavedModel", "ours", "saved_model_text",
                               dict(precision=precision, **text_kwargs)))
        out.append(Measurement("text", "keras-hub", "kerashub", "text", dict(precision=precision, **text_kwargs)))
        out.append(Measurement("text", "Hugging Face", "hf", "text", dict(precision=precision, **text_kwargs)))
        out.append(Measurement("text", ONE_BATCH, "ours", "text",
                               dict(precision=precision, one_padded_batch=True, **text_kwargs)))

    out += finetune_plan(spm_path, finetune_sentences, smoke)
    large_batch = 4 if quick else 8
    out += _large(quick, large_batch)
    return sorted(out, key=_priority) if quick else out


def _priority(m: Measurement) -> int:
    """--quick runs the comparisons that matter most first (see --budget_minutes):
    each system's training in bfloat16, raw text, inference, then the rest."""
    bf16 = m.kwargs.get("precision") == "bfloat16" and not m.kwargs.get("xla")
    order = [m.group == "matmul" and m.system == "tensorflow",
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


# Fine-tuning: batches of 32 real sentences, one timed pass over a pool of
# FINETUNE_STEPS batches after FINETUNE_WARMUP untimed ones.
FINETUNE_BATCH, FINETUNE_STEPS, FINETUNE_WARMUP = 32, 4, 1
FINETUNE_POOL = FINETUNE_BATCH * FINETUNE_STEPS
# ours with albert-finetune's feed (length buckets) and with plain fit on random batches.
FINETUNE_BUCKETED = "albert-tf, albert-finetune's batches"
FINETUNE_SYSTEMS = [("albert-tf fit", "ours", dict(feed="fit")),
                    (FINETUNE_BUCKETED, "ours", dict(feed="finetune")),
                    ("keras-hub fit", "kerashub", {}), ("Hugging Face", "hf", {})]


def finetune_plan(spm_path: str, sentences_file: str, smoke: bool = False) -> List[Measurement]:
    """The fine-tuning group: each system once, mixed bfloat16 (bench/systems/finetune.py)."""
    steps = dict(warmup=1, steps=2) if smoke else dict(warmup=FINETUNE_WARMUP, steps=FINETUNE_STEPS)
    return [Measurement("finetune", system, "finetune", function,
                        dict(precision="bfloat16", spm_path=spm_path, sentences_file=sentences_file,
                             batch=FINETUNE_BATCH, shape="tiny" if smoke else "base", **steps, **extra))
            for system, function, extra in FINETUNE_SYSTEMS]


def _large(quick: bool, large_batch: int) -> List[Measurement]:
    out = []
    for preset in ("albert_large_v2", "bert_large"):
        for precision in (("float32",) if quick else ("float32", "bfloat16")):
            out.append(Measurement("large", preset, "ours", "train_step",
                                   dict(preset=preset, precision=precision, xla=False, batch=large_batch,
                                        seq=128, warmup=1, steps=2 if quick else 3, optimizer_alone=True)))
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
def matmul_limits(measurements: Sequence[Measurement]) -> Dict[str, float]:
    """Best GFLOP/s per precision over every framework, kernel and shape."""
    limits: Dict[str, float] = {}
    for m in measurements:
        if m.group != "matmul" or not m.runs:
            continue
        best = max(max(r[k] for k in r if "x" in k and k not in ("wall_s",)) for r in m.runs)
        p = m.kwargs["precision"]
        limits[p] = max(limits.get(p, 0.0), best)
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
    return ", ".join(f"{v:.2f}" for v in values) if values else "; ".join(m.errors) or "not run"


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
    for name in ("tensorflow", "tensorflow-text", "keras", "keras-hub", "torch", "transformers"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def render(measurements: Sequence[Measurement], header: Dict[str, object]) -> str:
    """RESULTS.md: machine, versions, command, then one table per measure."""
    cpu = header["cpu"]
    limits = matmul_limits(measurements)
    base = common.model_shape("albert_base_v2")
    lines = [
        "# albert-tf benchmark results",
        "",
        f"Command: `{header['command']}` ({header['date']}, {header['minutes']:.0f} minutes).",
        "",
        f"Machine: {cpu['model']}, {cpu['cores']} cores; flags that matter: "
        f"{', '.join(cpu['flags']) or 'none'} (AMX: {'yes' if 'amx_bf16' in cpu['flags'] else 'no'}, "
        f"avx512_bf16: {'yes' if 'avx512_bf16' in cpu['flags'] else 'no'}). "
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
        "bfloat16 is Keras mixed_bfloat16 / torch.autocast (float32 weights).",
        "",
        "## Matmul limit (GFLOP/s, best of repetitions)",
        "",
        "| framework | precision | " + " | ".join(
            f"{m}x{k}x{n}" for m, k, n in __import__("bench.systems.matmul", fromlist=["SHAPES"]).SHAPES) + " |",
        "|---|---|---|---|---|---|",
    ]
    from bench.systems.matmul import SHAPES

    for m in (x for x in measurements if x.group == "matmul"):
        if not m.runs:
            lines.append(f"| {m.system} | {m.kwargs['precision']} | {'; '.join(m.errors)} | | | |")
            continue
        kernels = sorted({k.split()[0] for k in m.runs[0] if " " in k})
        for kernel in kernels:
            cells = [_fmt(max(r[f"{kernel} {a}x{b}x{c}"] for r in m.runs), 0) for a, b, c in SHAPES]
            lines.append(f"| {m.system} ({kernel}) | {m.kwargs['precision']} | " + " | ".join(cells) + " |")
    lines += ["", "Limit used for MFU: " + ", ".join(f"{p} {v:.0f} GFLOP/s" for p, v in sorted(limits.items()))
              + " (the best of every framework, kernel and shape).", ""]

    train = [m for m in measurements if m.group == "train"]
    lines += ["## Training throughput (sequences/s)", "",
              f"Training FLOPs per sequence: {common.training_flops(base, 128, 20) / 1e9:.1f} G at length 128, "
              f"{common.training_flops(base, 512, 20) / 1e9:.1f} G at 512 (3 x forward matmuls; the MLM head on the "
              "masked positions only, for every system).", ""]
    lines += throughput_table(train, lambda m: common.training_flops(base, m.kwargs["seq"], 20), limits,
                              "seq/s")
    for batch, seq in sorted({(m.kwargs["batch"], m.kwargs["seq"]) for m in train}):
        lines += _ratio_lines([m for m in train if (m.kwargs["batch"], m.kwargs["seq"]) == (batch, seq)],
                              f"training at batch {batch}, length {seq}")

    infer = [m for m in measurements if m.group == "infer"]
    lines += ["## Encoder inference (sequences/s, pooled output)", "",
              f"Forward FLOPs per sequence at length 128: {common.forward_flops(base, 128, None) / 1e9:.1f} G.", ""]
    lines += throughput_table(infer, lambda m: common.forward_flops(base, m.kwargs["seq"], None), limits,
                              "seq/s")
    for batch in sorted({m.kwargs["batch"] for m in infer}):
        lines += _ratio_lines([m for m in infer if m.kwargs["batch"] == batch], f"inference at batch {batch}")

    text = [m for m in measurements if m.group == "text"]
    if text:
        lines += ["## Raw-text inference (32 real sentences of 5-60 words, sentences/s)", "",
                  "Each system's own text path: ours the task model's in-graph preprocessor (pads to the "
                  "batch's longest) and the exported SavedModel (`serving_default`); keras-hub its "
                  "AlbertTokenizer + AlbertTextClassifierPreprocessor (pads to sequence_length 128) + backbone; "
                  "Hugging Face AlbertTokenizer (Rust, from spiece.model; padding='longest') + AlbertModel. Tokenization is inside "
                  "the timed call.", "",
                  "| system | precision | sentences/s (median) | runs | padded length | "
                  "one-request latency ms (median / p90) | peak RSS MB |", "|---|---|---|---|---|---|---|"]
        for m in text:
            lat = (f"{m.median('latency_ms_median'):.0f} / {m.median('latency_ms_p90'):.0f}"
                   if m.median("latency_ms_median") else "")
            lines.append(f"| {m.system} | {m.kwargs['precision']} | {_fmt(m.median('per_s'))} | {_spread(m)} | "
                         f"{_fmt(m.median('padded_length'), 0)} | {lat} | {_fmt(m.maximum('peak_rss_mb'), 0)} |")
        lines += [""] + _ratio_lines(text, "raw text")

    lines += finetune_section([m for m in measurements if m.group == "finetune"])

    large = [m for m in measurements if m.group == "large"]
    if large:
        lines += ["## ALBERT-large vs BERT-large (training with LAMB state, length 128)", "",
                  "albert-pretrain's step; `optimizer` is the LAMB update alone (zero gradients, the same "
                  "memory traffic), so step = forward/backward (arithmetic) + update (parameter memory).", "",
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
        lines += [""] + large_summary(large)

    lines += ["## Data pipeline", "", header.get("data_note", ""), ""]
    return "\n".join(lines) + "\n"


def _paired_ratios(a: Measurement, b: Measurement) -> List[float]:
    """a / b per repetition, where both ran (runs are in repetition order unless one failed)."""
    if a.errors or b.errors:
        return []
    return [x["per_s"] / y["per_s"] for x, y in zip(a.runs, b.runs)]


def finetune_section(rows: Sequence[Measurement]) -> List[str]:
    """The fine-tuning table, ours against each peer, and the padding gain predicted vs measured."""
    if not rows:
        return []
    shape = rows[0].kwargs.get("shape", "base")
    lines = [f"## Fine-tuning on real text (2-label sentence classification, batch {rows[0].kwargs['batch']}, "
             "training examples/s)", "",
             f"ALBERT-{shape} shape, random weights, mixed bfloat16. Each system trains on the same "
             f"{rows[0].kwargs['batch'] * rows[0].kwargs['steps']} real sentences of 5-60 words with random labels "
             f"through its own text path: {rows[0].kwargs['warmup']} untimed "
             f"batch{'es' if rows[0].kwargs['warmup'] != 1 else ''}, then one timed pass "
             "(examples / seconds of the pass). Ours: `AlbertClassifier` (in-graph preprocessor, pads to the "
             "batch's longest) + `albert_tf.optimizers.adamw`, `model.fit` on random batches, and on the batches "
             "albert-finetune feeds (examples of similar length, `ClassificationTask.train_dataset`); keras-hub: "
             "`AlbertTextClassifier` + `AlbertTextClassifierPreprocessor` (pads to 128), Keras AdamW, `fit`; "
             "Hugging Face: `AlbertForSequenceClassification`, AlbertTokenizer (padding='longest') in every "
             "step, torch AdamW, `torch.autocast`. GFLOP/example: training matmuls at the padded lengths. "
             "Examples per CPU-second: the pass's examples over the CPU time of all the process's threads "
             "(steadier than wall time when other jobs share the cores).", "",
             "| system | precision | examples/s (median) | runs | examples per CPU-s (median) | "
             "padded tokens/example | real tokens/example | train GFLOP/example | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m in rows:
        lines.append(f"| {m.system} | {m.kwargs['precision']} | {_fmt(m.median('per_s'))} | {_spread(m)} | "
                     f"{_fmt(m.median('per_cpu_s'))} | "
                     f"{_fmt(m.median('padded_tokens'), 1)} | {_fmt(m.median('real_tokens'), 1)} | "
                     f"{_fmt(m.median('gflop_per_example'), 1)} | {_fmt(m.maximum('peak_rss_mb'), 0)} |")
    lines += [""] + _ratio_lines(rows, "fine-tuning on real text")[:-1]
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
    by = {m.system: m for m in rows if m.median("per_s")}
    if FINETUNE_BUCKETED in by and "albert-tf fit" in by:
        a, b = by[FINETUNE_BUCKETED], by["albert-tf fit"]
        predicted = b.median("gflop_per_example") / a.median("gflop_per_example")
        paired = _paired_ratios(a, b)
        cpu = (f"; per CPU-second {a.median('per_cpu_s') / b.median('per_cpu_s'):.2f}x"
               if a.median("per_cpu_s") and b.median("per_cpu_s") else "")
        lines.append(f"- length buckets (albert-finetune's batches vs random batches, same model): predicted "
                     f"{predicted:.2f}x from the FLOPs at the padded lengths ({b.median('padded_tokens'):.0f} -> "
                     f"{a.median('padded_tokens'):.0f} tokens/example), measured "
                     f"**{a.median('per_s') / b.median('per_s'):.2f}x**"
                     + (f" (per repetition: {', '.join(f'{r:.2f}x' for r in paired)})" if paired else "") + cpu)
    return lines + [""]


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
            if l.startswith("|") and ("instances/s" in l or "original tool" in l)]
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
    args = parser.parse_args(argv)
    reps = args.reps or (1 if args.quick else 3)
    python = sys.executable

    spm_path = common.spm_model(args.cache_dir)
    sentences_file = os.path.join(args.cache_dir, "sentences.json")
    if not os.path.exists(sentences_file):
        with open(sentences_file + ".tmp", "w", encoding="utf-8") as f:
            json.dump(common.mixed_length_sentences(32), f, indent=0)
        os.replace(sentences_file + ".tmp", sentences_file)
    with open(sentences_file, encoding="utf-8") as f:
        sentences = json.load(f)
    finetune_file = os.path.join(args.cache_dir, f"finetune_sentences_{FINETUNE_POOL}.json")
    if not os.path.exists(finetune_file):
        with open(finetune_file + ".tmp", "w", encoding="utf-8") as f:
            json.dump(common.mixed_length_sentences(FINETUNE_POOL, seed=1), f, indent=0)
        os.replace(finetune_file + ".tmp", finetune_file)
    measurements = plan(args.quick, spm_path, sentences, finetune_file, args.smoke)
    if args.only:
        groups = set(args.only.split(","))
        measurements = [m for m in measurements if m.group in groups]
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
            json.dump({"header": header(), "measurements": [dataclasses.asdict(m) for m in measurements]}, f,
                      indent=1, default=str)
        os.replace(raw + ".tmp", raw)

    run_all(measurements, reps, args.timeout, python,
            budget_s=args.budget_minutes * 60 if args.budget_minutes else None, after_each=save)
    save()
    final = dict(header(), data_note=data_note(args.with_data, python))
    return _write(render(measurements, final), args.output)


def _write(text: str, path: str) -> int:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
