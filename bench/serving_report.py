"""The serving plan's sections of a run file: one request at a time (p50/p90/p99 of the calls) and the sweep of
batch sizes and lengths (`bench.plan.latency_plan`, `sweep_plan`)."""

from __future__ import annotations

import statistics
from typing import Dict, List, Sequence

from bench import peak as hardware
from bench import plan as P
from bench import stats
from bench.plan import Measurement
from bench.tables import by_table, fmt, markdown_table, ratio_table, setting, throughput_table, title

PERCENTILES = (50, 90, 99)


def _over_repetitions(m: Measurement, q: float) -> str:
    """The median over repetitions of each repetition's q-th percentile call, with their range."""
    values = list(stats.call_percentile_ms(m, q).values())
    if not values:
        return m.skip or "; ".join(m.errors) or "not run"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def latency_section(rows: Sequence[Measurement], reps: int) -> List[str]:
    if not rows:
        return []
    kw = rows[0].kwargs
    lines = [f"## One request at a time (milliseconds per call, batch {kw['batch']}, length {kw['seq']})", "",
             f"Each system answers {kw['steps']} calls of one full-length sequence, one after another, after "
             f"{kw['warmup']} untimed ones. In each repetition the p50, p90 and p99 of its calls (interpolated "
             "between calls); a cell is the median of those over the repetitions, with their range. The ratios "
             "compare the median call's rate (the inverse of p50): above 1.0, ours answers faster.", ""]
    header = ["system", "runtime", "setting"] + [f"p{q} ms" for q in PERCENTILES] + ["peak RSS MB"]
    for name, part in by_table(rows).items():
        cells = [[m.system, P.runtime(m), setting(m)] + [_over_repetitions(m, q) for q in PERCENTILES]
                 + [fmt(m.maximum("peak_rss_mb"), 0)] for m in part]
        lines += [f"### {title(name)}", ""] + markdown_table(header, cells) + [""] + ratio_table(part)
    return lines


def sweep_section(rows: Sequence[Measurement], limits, reps: int, top: Dict[str, hardware.Peak]) -> List[str]:
    if not rows:
        return []
    lines = ["## Serving sweep (sequences/s by batch size and length)", "",
             "The same synthetic full-length batch for every system in a table; warm-up 2 calls, then about the "
             "tokens of 5 calls at batch 32 x 128 (`bench.plan.sweep_steps`); the median call.", ""]
    for name, part in by_table(rows).items():
        lines += [f"### {title(name)}", ""] + throughput_table(part, hardware.row_flops(part[0]), limits, "seq/s",
                                                                reps, top)
        lines += ratio_table(part)
    return lines
