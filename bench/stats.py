"""The statistics of a run: paired ratios per repetition, when a ratio is "level", and MFU per repetition.

The rules (every row and ratio of a run follows them; the run file states them):

- Repetitions are interleaved: every measurement once, then again, `--reps` times (default 5), each a
  fresh process. A row's figure is the median over its repetitions; every repetition's value is shown.
- No outlier rule: no repetition is dropped, for any row.
- A ratio is paired: ours / peer within each repetition where both ran (the two ran minutes apart, under the
  same load), then the median of those per-repetition ratios, with their minimum and maximum.
- A ratio whose range (min-max) includes 1.0 is "level"; with fewer than MIN_PAIRED repetitions it is
  "too few repetitions" (no claim).
- MFU: in each repetition, the row's model FLOPs per second over that repetition's matmul limit (the best
  median-call rate of TensorFlow's and OpenVINO's matmuls, `bench.systems.matmul`, in the same
  precision); the row's MFU is the median of those, with their range.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Callable, Dict, List, Optional, Sequence

from bench.plan import Measurement

MIN_PAIRED = 3
LIMIT_FRAMEWORKS = ("tensorflow", "openvino")  # torch's matmul rate is shown, not used as a limit


@dataclasses.dataclass
class Ratio:
    """Per-repetition ratios of two rows (ordered by repetition) and their summary."""

    values: List[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> Optional[float]:
        return statistics.median(self.values) if self.values else None

    @property
    def low(self) -> Optional[float]:
        return min(self.values) if self.values else None

    @property
    def high(self) -> Optional[float]:
        return max(self.values) if self.values else None

    @property
    def verdict(self) -> str:
        """"too few repetitions", "level" (the range includes 1.0), "ahead" or "behind"."""
        if self.n < MIN_PAIRED:
            return "too few repetitions"
        if self.low <= 1.0 <= self.high:
            return "level"
        return "ahead" if self.low > 1.0 else "behind"

    def text(self) -> str:
        """The ratio as the tables print it.

        >>> Ratio([1.2, 1.3, 1.25]).text(), Ratio([0.9, 1.1, 1.05]).text()
        ('**1.25x** (1.20-1.30x)', 'level (1.05x; 0.90-1.10x)')
        >>> Ratio([1.5]).text()
        'too few repetitions (1.50x)'
        """
        if not self.values:
            return "n/a"
        if self.verdict == "too few repetitions":
            return f"too few repetitions ({', '.join(f'{v:.2f}x' for v in self.values)})"
        spread = f"{self.low:.2f}-{self.high:.2f}x"
        if self.verdict == "level":
            return f"level ({self.median:.2f}x; {spread})"
        return f"**{self.median:.2f}x** ({spread})"


def paired(a: Measurement, b: Measurement, field: str = "per_s") -> Ratio:
    """a / b in each repetition where both have `field` (a repetition that failed for either is left out)."""
    x, y = a.values(field), b.values(field)
    return Ratio([x[rep] / y[rep] for rep in sorted(set(x) & set(y)) if y[rep]])


def matmul_limits(rows: Sequence[Measurement]) -> Dict[str, Dict[int, float]]:
    """{precision: {repetition: the best rate (GFLOP/s) of TensorFlow's and OpenVINO's kernels and shapes in it}}.

    Each rate is a median call (`bench.systems.matmul`), the statistic of the throughputs it divides.
    """
    limits: Dict[str, Dict[int, float]] = {}
    for m in rows:
        if m.group != "matmul" or m.system not in LIMIT_FRAMEWORKS:
            continue
        for i, run in enumerate(m.runs):
            rates = [float(v) for k, v in run.items() if _is_rate(k, v)]
            if rates:
                rep = int(run.get("rep", i))
                per_rep = limits.setdefault(m.precision, {})
                per_rep[rep] = max(per_rep.get(rep, 0.0), max(rates))
    return limits


def _is_rate(key: str, value) -> bool:
    kernel, _, shape = key.partition(" ")
    return bool(shape) and "x" in shape and isinstance(value, (int, float))


def matmul_rates(rows: Sequence[Measurement]) -> Dict[tuple, Dict[str, List[float]]]:
    """{(framework (kernel), precision): {shape: [rate per repetition]}} of the matmul rows."""
    out: Dict[tuple, Dict[str, List[float]]] = {}
    for m in rows:
        if m.group != "matmul":
            continue
        for run in m.runs:
            for key, value in run.items():
                if _is_rate(key, value):
                    kernel, _, shape = key.partition(" ")
                    env = "".join(f", {k}={v}" for k, v in sorted(m.env.items()))
                    out.setdefault((f"{m.system} ({kernel}{env})", m.precision), {}).setdefault(shape, []).append(
                        float(value))
    return out


def mfu(m: Measurement, flops_per_item: Callable[[Measurement], float],
        limits: Dict[str, Dict[int, float]]) -> Ratio:
    """The row's MFU in each repetition that has both its throughput and a limit of its precision."""
    limit = limits.get(m.precision, {})
    return Ratio([rate * flops_per_item(m) / 1e9 / limit[rep]
                  for rep, rate in sorted(m.values().items()) if limit.get(rep)])


def call_percentile_ms(m: Measurement, q: float) -> Dict[int, float]:
    """{repetition: the q-th percentile of its timed calls, in ms} (linear interpolation between calls), for
    the runs that saved every call ("samples_s").

    >>> m = Measurement("latency", "x", "ours", "infer", {}, runs=[{"rep": 0, "samples_s": [0.01, 0.02, 0.03]}])
    >>> call_percentile_ms(m, 50), call_percentile_ms(m, 100)
    ({0: 20.0}, {0: 30.0})
    """
    out = {}
    for i, run in enumerate(m.runs):
        samples = sorted(float(t) for t in run.get("samples_s") or ())
        if samples:
            position = (len(samples) - 1) * q / 100
            low = int(position)
            high = min(low + 1, len(samples) - 1)
            out[int(run.get("rep", i))] = 1000 * (samples[low] + (samples[high] - samples[low]) * (position - low))
    return out
