"""The run file (bench/results/<cpu-kind>.md): rendered from the saved run (.json) alone, never edited.

`render(measurements, header)` writes the header (command, machine, threads, versions, the statistics'
rules, and a PARTIAL banner when measurements are missing), then one section per group: each table's rows
(median and every repetition), then its ratios (`bench.stats`: paired per repetition, with their range,
"level" when the range includes 1.0), then what was not measured and why.
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, List, Optional, Sequence

from bench import peak as hardware
from bench import plan as P
from bench import stats
from bench.plan import Measurement
from bench.serving_report import latency_section, sweep_section
from bench.systems import common, threads
from bench.tables import by_table, fmt, markdown_table, ratio_table, repetitions, setting, throughput_table, title


# ------------------------------------------------------------------ header
# Other processes' largest share of the cores below which a run counts as quiet: the bench.run parent, the
# system's daemons and children the worker did not wait for (so not counted as its own) stay under it.
QUIET_OTHERS = 0.10
RULES = ("Statistics: every figure is a fresh process; repetitions are interleaved (every measurement once, then "
         "again); a row shows the median over its repetitions and every repetition's value. No outlier rule: no "
         "repetition is dropped, for any row. Ratios are paired: ours / peer within each repetition where both "
         "ran, then the median of those, with their minimum and maximum; a ratio whose range includes 1.0 is "
         f"\"level\", one with fewer than {stats.MIN_PAIRED} paired repetitions makes no claim. The ranges are "
         "within this run: between runs, ratios have moved by more than them, so a claim rests on several runs "
         "(docs/benchmarks.md). MFU: in each repetition, model FLOPs per second over the CPU's hardware peak "
         "(cores x clock x FLOP per cycle for the precision, `bench.peak`; n/a for runs that did not record the "
         "clock); the median of those, with their range. Beside it, the share of the GEMM probe: the same over "
         "the best median-call rate of TensorFlow's and OpenVINO's matmuls in that repetition and precision, a "
         "measured rate that good kernels reach or pass, not a limit.")


def header_lines(header: Dict[str, object], measurements: Sequence[Measurement]) -> List[str]:
    cpu = header["cpu"]
    kind = header.get("cpu_kind") or common.cpu_kind(cpu)
    lines = [f"# albert-tf benchmark results: {kind} CPU", ""]
    missing = not_measured(measurements, int(header["reps"]))
    if missing or header.get("stopped"):
        why = header.get("stopped") or "see Not measured, at the end"
        lines += [f"**PARTIAL RUN**: {len(missing)} of {len(measurements)} measurements lack repetitions ({why}). "
                  f"Ratios with fewer than {stats.MIN_PAIRED} paired repetitions make no claim.", ""]
    expected = header.get("expected_minutes")
    lines += [f"Command: `{header['command']}` ({header['date']}, {header['minutes']:.0f} minutes"
              + (f"; {expected:.0f} expected" if expected else "") + f"). Plan: {header.get('plan', 'not recorded')}"
              f", {header['reps']} repetitions.", ""] + extension_lines(header) + [
              f"Machine: {common.cpu_line(cpu)} Kind: {kind}. " + load_line(header, measurements)
              + load_warning(header, measurements)
              + host_line(measurements), ""] + provenance_lines(header) + hardware.peak_lines(header) + [
              threads_line(header, measurements), "",
              "Versions: " + ", ".join(f"{k} {v}" for k, v in header["versions"].items()) + ".", "", RULES, "",
              f"Model: ALBERT-base (H 768, E 128, 12 layers), random weights; training on "
              f"{common.PREDICTIONS_PER_SEQ} masked positions with LAMB (Hugging Face: torch AdamW, PyTorch has no "
              "LAMB) and global-norm clipping; keras-hub's AlbertMaskedLM has no SOP head. bfloat16 is Keras "
              "mixed_bfloat16 / torch.autocast (float32 weights) / OpenVINO's bf16 inference precision. OpenVINO and "
              "ONNX Runtime run Hugging Face's AlbertModel exported to ONNX; "
              f"{P.OURS_OPENVINO} is our encoder written by `albert-export --format=openvino`, run by OpenVINO "
              "with the same settings. Every table compares systems doing the same work (the same batches, "
              "padding or sorting, precision, threads)" + unlike_note(measurements) + "; ratios pair every row of "
              "ours with every peer row of the same table and precision.", ""]
    return lines


def unlike_note(measurements: Sequence[Measurement]) -> str:
    """The exceptions to "the same work" in this run, each table once."""
    found = sorted({f"{P.table(b)}: {P.unlike_work(a, b)}" for a, b in P.pairs(measurements) if P.unlike_work(a, b)})
    if not found:
        return ""
    return (", EXCEPT where a row pads otherwise (" + "; ".join(found) + "): not the same work, and the ratios "
            "against such a row say so")


def extension_lines(header: Dict[str, object]) -> List[str]:
    """One line per `bench.run --extend` of the run: what it added, when, from which code, under what load."""
    lines = []
    for e in header.get("extensions", []):
        code = e.get("code") or {}
        groups = ", ".join(e.get("only") or []) or "every group"
        what = (f"reran the missing repetition(s) {'; '.join(e['filled'])}" if e.get("filled")
                else f"{e['reps']} more repetition(s) of {groups} and the GEMM probe")
        lines += [f"Extended by `{e['command']}` ({e['date']}, {e.get('minutes', 0):.0f} minutes): {what}; commit {code.get('commit', 'not recorded')}"
                  + (" (DIRTY)" if code.get("dirty") else "") + f"; 1-minute load {e['load_start']:.2f} at the start, "
                  f"{e.get('load_max', e['load_start']):.2f} at most" + (f"; stopped: {e['stopped']}" if e.get("stopped")
                                                                          else "") + ".", ""]
    return lines


def others_share(measurements: Sequence[Measurement]) -> Optional[float]:
    """The largest share of all cores that processes other than a measurement's own took while it ran (runs
    since `host_others` was recorded), None for older runs."""
    others = [r["host_others"] for m in measurements for r in m.runs if "host_others" in r]
    return max(others) if others else None


def other_jobs_ran(header: Dict[str, object], measurements: Sequence[Measurement]) -> bool:
    """Whether other jobs shared the CPU: other processes' share above `QUIET_OTHERS` where the run recorded it;
    before, the load average above the cores."""
    others = others_share(measurements)
    if others is not None:
        return others > QUIET_OTHERS
    return header.get("load_max", header["load_end"]) > header["cpu"]["cores"]


def load_line(header: Dict[str, object], measurements: Sequence[Measurement] = ()) -> str:
    """The 1-minute load average at the start, the end and at most; "above the cores" only when it was, and
    whose work that was where the run recorded it (the load average counts the benchmark's own threads and
    helper processes, torch.compile's compile workers among them, as much as anyone else's)."""
    cores = header["cpu"]["cores"]
    most = header.get("load_max", header["load_end"])
    others = others_share(measurements)
    if most <= cores:
        where = f"within the {cores} cores, the benchmark's own threads included"
    elif others is None:
        where = f"above the {cores} cores: other jobs were running"
    else:
        where = (f"above the {cores} cores; other processes than the measurements' own took {100 * others:.0f}% "
                 f"of the cores at most" + (": other jobs were running" if other_jobs_ran(header, measurements)
                                            else ", so the load was the benchmark's own"))
    return (f"1-minute load average {header['load_start']:.2f} at the start, {header['load_end']:.2f} at the end, "
            f"{most:.2f} at most ({where}).")


def host_line(measurements: Sequence[Measurement]) -> str:
    """The machine's busy and stolen shares during the measurements (/proc/stat; runs since issue 33), and
    other processes' share where recorded."""
    busy = [r["host_busy"] for m in measurements for r in m.runs if "host_busy" in r]
    if not busy:
        return ""
    steal = [r.get("host_steal", 0.0) for m in measurements for r in m.runs if "host_busy" in r]
    others = others_share(measurements)
    return (f" While the measurements ran (/proc/stat, all cores): busy {100 * statistics.median(busy):.0f}% "
            f"(median over measurements; {100 * max(busy):.0f}% at most), stolen by the hypervisor "
            f"{100 * max(steal):.0f}% at most" + ("." if others is None else
                                                   f", other processes {100 * others:.0f}% at most."))


def provenance_lines(header: Dict[str, object]) -> List[str]:
    """The code the run measured and the environment it ran in (runs since issue 33)."""
    code = header.get("code")
    if not code:
        return ["Code: not recorded (runs before issue 33: no commit, no dirty flag, no per-call samples).", ""]
    dirty = {True: "DIRTY: the work tree differed from it in " + ", ".join(code.get("changed", [])),
             False: "clean work tree", None: "work tree state unknown"}[code.get("dirty")]
    env = header.get("environment") or {}
    return [f"Code: commit {code['commit']} ({dirty}). Environment: "
            + (", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "none of bench.run.ENVIRONMENT set")
            + ". Every timed call's seconds are in the JSON (samples_s), beside each process's median.", ""]


def load_warning(header: Dict[str, object], measurements: Sequence[Measurement] = ()) -> str:
    """A warning when other jobs shared the CPU: OpenMP's spinning threads (torch) lose more than TensorFlow's pool.
    Where the run recorded other processes' share, that decides; before, the load average above the cores."""
    if not other_jobs_ran(header, measurements):
        return ""
    others = others_share(measurements)
    why = ("The load exceeded the cores" if others is None else
           f"Other processes took up to {100 * others:.0f}% of the cores")
    return (f" **{why}: every figure is slowed, and torch's OpenMP threads, which spin while "
            "they wait for each other, lose far more than TensorFlow's or OpenVINO's thread pools; ratios against "
            "torch from this run favour ours. Rerun on a quiet machine.**")


def threads_line(header: Dict[str, object], measurements: Sequence[Measurement]) -> str:
    n = header.get("threads")
    if not n:
        return "Threads: not set or recorded in this run (runs before issue 27)."
    s = threads.settings(int(n))
    line = (f"Threads: {n} for every framework (TensorFlow intra-op {s['tensorflow_intra_op']}, inter-op "
            f"{s['tensorflow_inter_op']}; torch {s['torch']}, inter-op {s['torch_interop']}; ONNX Runtime intra-op "
            f"{s['onnxruntime_intra_op']}; OpenVINO INFERENCE_NUM_THREADS {s['openvino']}).")
    off = sorted({f"{m.system} {k}={v}" for m in measurements for r in m.runs
                  for k, v in threads.mismatches(r.get("threads", {}), int(n)).items()})
    return line + (" Rows that reported other threads: " + "; ".join(off) + "." if off
                   else " Every run reported these.")


# ---------------------------------------------------------------- sections
def matmul_section(rows: Sequence[Measurement]) -> List[str]:
    rates = stats.matmul_rates(rows)
    if not rates and not rows:
        return []
    by_size = lambda shape: (-math.prod(map(int, shape.split("x"))), shape)  # noqa: E731
    shapes = sorted({s for row in rates.values() for s in row}, key=by_size)
    lines = ["## GEMM probe (GFLOP/s, median call; median over repetitions)", "",
             "| framework (kernel) | precision | " + " | ".join(shapes) + " |", "|---|---|" + "---|" * len(shapes)]
    for (name, precision), row in rates.items():
        lines.append(f"| {name} | {precision} | " + " | ".join(
            fmt(statistics.median(row[s]), 0) if s in row else "n/a" for s in shapes) + " |")
    lines.append("")
    for precision, per_rep in sorted(stats.matmul_limits(rows).items()):
        lines.append(f"GEMM probe per repetition, {precision}: " + ", ".join(
            f"{per_rep[r]:.0f}" for r in sorted(per_rep)) + " GFLOP/s (the best of TensorFlow's and OpenVINO's "
            "kernels and shapes in that repetition; each row's share of the GEMM probe divides by its own "
            "repetition's).")
    return lines + [""]


def train_section(rows: Sequence[Measurement], limits, reps: int, top: Dict[str, hardware.Peak]) -> List[str]:
    if not rows:
        return []
    lines = ["## Training throughput (sequences/s)", "",
             "The same synthetic full-length batches for every system. FLOPs per sequence: "
             f"{common.training_flops(common.model_shape('base'), 128, 20) / 1e9:.1f} G at length 128 (3 x forward "
             "matmuls). Every system runs the MLM head on the masked positions only (Hugging Face: its encoder, "
             f"then `model.predictions` on the gathered positions, `hf.masked_pretraining_loss`). {P.HF_COMPILED}: "
             f"that loss through `torch.compile`. {P.TRAIN_STEPS['steps']} timed steps after "
             f"{P.TRAIN_STEPS['warmup']} untimed ones; the median step.", ""]
    flops = hardware.row_flops(rows[0])
    for name, part in by_table(rows).items():
        lines += [f"### {title(name)}", ""] + throughput_table(part, flops, limits, "seq/s", reps, top)
        lines += ratio_table(part)
    return lines


def infer_section(rows: Sequence[Measurement], limits, reps: int, top: Dict[str, hardware.Peak]) -> List[str]:
    if not rows:
        return []
    lines = ["## Encoder inference (sequences/s, full-length batches)", "",
             "The same synthetic full-length batch for every system; both outputs computed. OpenVINO: "
             "INFERENCE_PRECISION_HINT and the PERFORMANCE_HINT shown; ONNX Runtime: default session options "
             "(threads set), float32 and int8 (dynamic quantization: no MFU).", ""]
    flops = hardware.row_flops(rows[0])
    for name, part in by_table(rows).items():
        lines += [f"### {title(name)}", ""] + throughput_table(part, flops, limits, "seq/s", reps, top)
        lines += ratio_table(part)
    return lines + check_lines(rows)


def handling(m: Measurement) -> str:
    """How a raw-text or fine-tuning row pads its batches."""
    if m.group == "finetune":
        if m.kwargs.get("feed") == "finetune":
            return "albert-finetune's own batches, each padded to its longest row"
        if m.kwargs.get("padding") == "bucket":
            return f"padded to a multiple of {common.BUCKET_STEP}"
        return "padded to its longest row"
    if m.module == "ours_openvino":
        return "packed tokens (no padding)" if P.sorts_rows(m) else "padded to its longest row"
    if m.module == "ours":
        return (f"length buckets of {m.kwargs.get('rows_per_bucket', P.SORT_ROWS)} rows" if P.sorts_rows(m)
                else "padded to its longest row")
    if m.kwargs.get("padding") == "bucket":
        return f"padded to a multiple of {common.BUCKET_STEP}"
    return f"rows sorted, {m.kwargs['sort_rows']} at a time" if P.sorts_rows(m) else "padded to its longest row"


def text_section(rows: Sequence[Measurement], reps: int) -> List[str]:
    if not rows:
        return []
    kw = rows[0].kwargs
    lines = [f"## Raw-text inference (sentences/s, batches of {P.TEXT_BATCH} real sentences of 5-60 words)", "",
             f"A pool of {P.TEXT_POOL} real sentences; every system gets the same batches, {kw['warmup']} untimed "
             f"then {kw['steps']} timed as one pass (sentences / seconds of the pass); tokenization is inside the "
             "timed call. Tables: "
             f"**{P.SORTED}** (any server can sort a batch's rows: our task model's length buckets, the same for "
             f"every peer; our OpenVINO export packs tokens instead), **{P.PADDED}**, **{P.GROUPED}** "
             "(Hugging Face's group_by_length sampler). Text paths: ours, the in-graph preprocessor (task model, "
             "SavedModel) or openvino-tokenizers inside our export; keras-hub, its tokenizer and preprocessor; "
             "Hugging Face, AlbertTokenizer; OpenVINO running Hugging Face's model, openvino-tokenizers' "
             "conversion of that tokenizer (its own text path) or AlbertTokenizer. \"padded tokens/sentence\": "
             "the length each row is run at after sorting or buckets (packed tokens: the dense layers run on the "
             "real tokens only, attention at the batch's padded length).", ""]
    header = ["system", "runtime", "setting", "batches", "sentences/s (median)", "per repetition",
              "padded tokens/sentence", "real tokens/sentence", "one-request latency ms (median / p90)", "peak RSS MB"]
    for name, part in by_table(rows).items():
        cells = [[m.system, P.runtime(m), setting(m), handling(m), fmt(m.median()), repetitions(m, reps),
                  fmt(m.median("padded_tokens"), 1), fmt(m.median("real_tokens"), 1), _latency(m),
                  fmt(m.maximum("peak_rss_mb"), 0)] for m in part]
        lines += [f"### {title(name)}", ""] + markdown_table(header, cells) + [""] + ratio_table(part)
    return lines + packing_lines(rows) + check_lines(rows)


def _latency(m: Measurement) -> str:
    if not m.median("latency_ms_median"):
        return ""
    return f"{m.median('latency_ms_median'):.0f} / {m.median('latency_ms_p90'):.0f}"


def packing_lines(rows: Sequence[Measurement]) -> List[str]:
    """Our packed OpenVINO export against the same model padded, on the same random batches."""
    ours = [m for m in rows if m.module == "ours_openvino" and m.kwargs.get("feed") == common.RANDOM]
    packed = [m for m in ours if P.sorts_rows(m)]
    padded = [m for m in ours if not P.sorts_rows(m)]
    if not packed or not padded:
        return []
    r = stats.paired(packed[0], padded[0])
    return ["### Packing: our packed OpenVINO export against the same model padded (the same random batches)",
            "", f"- {P.OURS_OPENVINO} / {P.OURS_OPENVINO_PADDED}: {r.text()}; repetitions: {r.n}; reading: "
            f"{r.verdict}.", ""]


def finetune_section(rows: Sequence[Measurement], reps: int) -> List[str]:
    if not rows:
        return []
    kw = rows[0].kwargs
    lines = [f"## Fine-tuning on real text (2-label sentence classifier, batch {kw['batch']}, training examples/s)",
             "", f"ALBERT-{kw.get('shape', 'base')} shape, random weights, "
             + ("mixed bfloat16" if kw["precision"] == "bfloat16" else kw["precision"]) + ", random labels; batches "
             f"from the raw-text pool, {kw['warmup']} untimed then {kw['steps']} timed as one pass, the same batches "
             "for every system in a table. Ours: `AlbertClassifier` (in-graph preprocessor) + "
             "`albert_tf.optimizers.adamw`, `fit`; keras-hub: `AlbertTextClassifier`, its preprocessor in the "
             "tf.data pipeline, Keras AdamW; Hugging Face: `AlbertForSequenceClassification`, AlbertTokenizer in "
             f"every step, torch AdamW, torch.autocast; {P.HF_COMPILED}: the model through `torch.compile`. "
             f"{P.FINETUNE_BUCKETED}: albert-finetune's own batches (other batches: no ratio). Examples per "
             "CPU-second: over the CPU time of all the process's threads.", ""]
    header = ["system", "runtime", "batches", "examples/s (median)", "per repetition", "examples per CPU-s (median)",
              "padded tokens/example", "real tokens/example", "train GFLOP/example", "peak RSS MB"]
    for name, part in by_table(rows).items():
        cells = [[m.system, P.runtime(m), handling(m), fmt(m.median()), repetitions(m, reps),
                  fmt(m.median("per_cpu_s")), fmt(m.median("padded_tokens"), 1), fmt(m.median("real_tokens"), 1),
                  fmt(m.median("gflop_per_example"), 1), fmt(m.maximum("peak_rss_mb"), 0)] for m in part]
        lines += [f"### {title(name)}", ""] + markdown_table(header, cells) + [""]
        lines += ratio_table(part) + ratio_table(part, "per_cpu_s", " per CPU-second")
    return lines


def large_section(rows: Sequence[Measurement], reps: int) -> List[str]:
    if not rows:
        return []
    dropouts = {m.kwargs.get("dropout") for m in rows}
    same = (f"Both at dropout {dropouts.pop()} (the same work)." if len(dropouts) == 1 and None not in dropouts
            else "Each at its preset's dropout (albert_large_v2 0.0, bert_large 0.1): not the same work.")
    lines = ["## ALBERT-large vs BERT-large (training with LAMB state, length 128)", "",
             "albert-pretrain's step; `LAMB update` is the update alone (zero gradients, the same memory traffic), "
             f"so step = forward/backward + update. {same}", "",
             "| model | precision | batch | parameters | train FLOPs/seq | seq/s (median) | per repetition | step s | "
             "LAMB update s | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m in rows:
        lines.append(f"| {m.system} | {m.precision} | {m.kwargs['batch']} | "
                     f"{fmt((m.median('parameters') or 0) / 1e6, 1)} M | "
                     f"{common.training_flops(hardware.row_shape(m), 128, 20) / 1e9:.0f} G | {fmt(m.median())} | "
                     f"{repetitions(m, reps)} | {fmt(m.median('step_s'))} | {fmt(m.median('optimizer_s'))} | "
                     f"{fmt(m.maximum('peak_rss_mb'), 0)} |")
    lines.append("")
    for precision in sorted({m.precision for m in rows}):
        by = {m.system: m for m in rows if m.precision == precision and m.runs}
        if {"albert_large_v2", "bert_large"} <= set(by):
            flop_ratio = (common.training_flops(common.model_shape("bert_large"), 128, 20)
                          / common.training_flops(common.model_shape("albert_large_v2"), 128, 20))
            lines.append(f"- {precision}: ALBERT-large / BERT-large sequences/s "
                         f"{stats.paired(by['albert_large_v2'], by['bert_large']).text()}; arithmetic alone "
                         f"predicts {flop_ratio:.2f}x (BERT-large's E = H embedding and MLM head).")
    return lines + [""]


# The output checks' keys and what each compares against.
CHECKS = (("max_diff_vs_hf", "Hugging Face torch (float32)"), ("max_diff_vs_keras", "our Keras encoder (float32)"))


def check_lines(rows: Sequence[Measurement]) -> List[str]:
    """Each checked row's largest output difference on one padded batch, per reference; tokenizers' agreement."""
    lines = []
    for key, reference in CHECKS:
        checked = [m for m in rows if any(key in r for r in m.runs)]
        if checked:
            lines += [f"Outputs against {reference} on one padded batch: " + "; ".join(
                f"{m.system} {m.precision}: {_check_text(m, key)}" for m in checked) + ".", ""]
    tokens = [m for m in rows if m.module == "onnx_runtimes" and any("same_tokens" in r for r in m.runs)]
    if tokens:
        lines += ["openvino-tokenizers' ids against Hugging Face's AlbertTokenizer on the first timed batch: "
                  + "; ".join(f"{m.system} ({table_short(m)}): {_agreement(m)}" for m in tokens) + ".", ""]
    return lines


def _agreement(m: Measurement) -> str:
    if all(r.get("same_tokens") for r in m.runs):
        return "the same ids"
    share, extra = m.median("rows_differing"), m.median("extra_tokens")
    if share is None:
        return "OTHER ids"
    return f"other ids in {100 * share:.0f}% of the rows, {extra:+.2f} tokens per row"


def table_short(m: Measurement) -> str:
    return P.table(m).split(",")[0]


def _check_text(m: Measurement, key: str) -> str:
    if any(r.get("same_tokens") is False for r in m.runs):
        return "OTHER TOKENS than our TensorFlow preprocessor"
    diff = m.median(key)
    return ("largest difference " + ("n/a" if diff is None else f"{diff:.3g}")
            + ("" if all(r.get("within_bf16_tolerance") for r in m.runs) else " (OUTSIDE bf16 tolerance)"))


def not_measured(measurements: Sequence[Measurement], reps: int) -> List[Measurement]:
    """Rows with fewer repetitions than the run's (skipped, failed, or cut by the budget)."""
    return [m for m in measurements if len(m.runs) < reps]


def not_measured_lines(measurements: Sequence[Measurement], reps: int, stopped: str = "") -> List[str]:
    missing = not_measured(measurements, reps)
    if not missing:
        return []
    lines = ["## Not measured", "", "| measurement | repetitions | why |", "|---|---|---|"]
    for m in missing:
        why = m.skip or "; ".join(m.errors) or stopped or "not run"
        lines.append(f"| {m.key} | {len(m.runs)} of {reps} | {why} |")
    return lines + [""]


def render(measurements: Sequence[Measurement], header: Dict[str, object]) -> str:
    """The run file: header, then matmul, training, inference, one-request latency, the serving sweep, raw
    text, fine-tuning, large, not measured."""
    reps = int(header["reps"])
    limits = stats.matmul_limits(measurements)
    group = lambda name: [m for m in measurements if m.group == name]  # noqa: E731
    lines = header_lines(header, measurements)
    lines += matmul_section(group("matmul"))
    lines += train_section(group("train"), limits, reps, hardware.peaks(header))
    lines += infer_section(group("infer"), limits, reps, hardware.peaks(header))
    lines += latency_section(group("latency"), reps)
    lines += sweep_section(group("sweep"), limits, reps, hardware.peaks(header))
    lines += text_section(group("text"), reps)
    lines += finetune_section(group("finetune"), reps)
    lines += large_section(group("large"), reps)
    lines += not_measured_lines(measurements, reps, str(header.get("stopped", "")))
    return "\n".join(lines).rstrip() + "\n"
