"""The tables every section of a run file shows: rows with their median and every repetition, throughput
with MFU, and the paired ratios of a table's rows (`bench.stats`)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from bench import peak as hardware
from bench import plan as P
from bench import stats
from bench.plan import Measurement


def fmt(x: Optional[float], digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def title(name: str) -> str:
    return name[0].upper() + name[1:]


def setting(m: Measurement) -> str:
    parts = [m.precision]
    if "xla" in m.kwargs:
        parts.append("XLA" if m.kwargs["xla"] else "no XLA")
    if m.kwargs.get("hint"):
        parts.append(str(m.kwargs["hint"]))
    if "TF_XLA_FLAGS" in m.env:
        parts.append("XLA auto-clustering")
    if "TF_ENABLE_ONEDNN_OPTS" in m.env:
        parts.append("oneDNN " + ("on" if m.env["TF_ENABLE_ONEDNN_OPTS"] == "1" else "off"))
    return ", ".join(parts)


def repetitions(m: Measurement, reps: int, field: str = "per_s") -> str:
    """Every repetition's value in order ("-" where it did not run), or why there is none."""
    values = m.values(field)
    if not values:
        return m.skip or "; ".join(m.errors) or "not run"
    last = max(max(values) + 1, reps)
    return ", ".join(f"{values[r]:.2f}" if r in values else "-" for r in range(last))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> List[str]:
    """A Markdown table.

    >>> markdown_table(["a", "b"], [["1", "2"]])
    ['| a | b |', '|---|---|', '| 1 | 2 |']
    """
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(row) + " |" for row in rows])


def ratio_table(rows: Sequence[Measurement], field: str = "per_s", what: str = "") -> List[str]:
    """One line per (ours, peer) pair of `plan.pairs`: the paired ratio and its reading."""
    levers = P.lever_pairs(rows)
    pairs = [(a, b, stats.paired(a, b, field)) for a, b in P.pairs(rows) + levers]
    pairs = [(a, b, r) for a, b, r in pairs if r.values]
    if not pairs:
        return []
    lines = [f"Ratios{what}: ours / peer in each repetition, median (min-max); \"level\" when the range "
             "includes 1.0." + (" For a lever: the row with it / the same system with none (\"ahead\": the lever "
                                "gains)." if levers else ""),
             "", "| ours | peer | ours / peer | repetitions | reading |", "|---|---|---|---|---|"]
    for a, b, r in pairs:
        reading = {"ahead": "ours ahead", "behind": "ours behind"}.get(r.verdict, r.verdict)
        if P.unlike_work(a, b):
            reading += f"; NOT the same work: {P.unlike_work(a, b)}"
        lines.append(f"| {a.system} ({P.runtime(a)}, {setting(a)}) | {b.system} ({P.runtime(b)}, {setting(b)}) "
                     f"| {r.text()} | {r.n} | {reading} |")
    return lines + [""]


def percent(r: stats.Ratio) -> str:
    return f"{100 * r.median:.0f}% ({100 * r.low:.0f}-{100 * r.high:.0f}%)" if r.values else "n/a"


def throughput_table(rows: Sequence[Measurement], flops_fn, limits, unit: str, reps: int,
                     peaks: Dict[str, hardware.Peak]) -> List[str]:
    """Rows with MFU against the hardware peak and, beside it, the share of the GEMM probe."""
    cells = []
    for m in rows:
        to_peak = stats.mfu(m, flops_fn, hardware.constant_limit(peaks[m.precision].gflops, m)
                            if m.precision in peaks else {})
        cells.append([m.system, P.runtime(m), setting(m), str(m.kwargs["batch"]), str(m.kwargs["seq"]),
                      fmt(m.median()), repetitions(m, reps), percent(to_peak),
                      percent(stats.mfu(m, flops_fn, limits)), fmt(m.maximum("peak_rss_mb"), 0)])
    return markdown_table(["system", "runtime", "setting", "batch", "length", f"{unit} (median)", "per repetition",
                           "MFU of hardware peak (median, min-max)", "share of GEMM probe (median, min-max)",
                           "peak RSS MB"], cells) + [""]


def by_table(rows: Sequence[Measurement]) -> Dict[str, List[Measurement]]:
    out: Dict[str, List[Measurement]] = {}
    for m in rows:
        out.setdefault(P.table(m), []).append(m)
    return out
