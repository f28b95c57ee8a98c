"""Benchmark figures quoted in prose, each tied to the run files it comes from.

A quote is an HTML comment naming its source, then the figure exactly as this module renders it from the
run files' JSON (`bench/results/<name>.json`):

    <!-- bench: avx512-bf16; train; albert-tf step / Hugging Face, torch.compile -->albert-tf step level with ...

Forms of the comment (fields separated by ";", not "|", which would split a Markdown table's cell; FILES is one
or more run names, comma-separated, oldest first):

- `FILES; GROUP[: TABLE]; OURS / PEER`: the paired ratio of two rows (their `system` names as the run file's
  tables print them; TABLE, a part of the table's title, only when a group has the row in several tables).
  One run: "OURS level with PEER: 0.98x (0.92-1.12x), one run". Several runs: "OURS level with PEER:
  0.94-1.05x over 3 runs (0.99x, 0.94x, 1.05x; repetitions 0.82-1.11x)": the range of the runs' medians,
  each run's median, and the range of every paired repetition of every run.
- `FILES; rounds; OURS / PEER`: the same figure from a study that keeps each system's rate per interleaved
  round (`bench/studies/int8_serving.py`'s JSON), a round's two rates being one paired repetition.
- `FILE; verdicts`: how many of the run's ratios read ahead, level and behind.
- `FILE; GROUP[: TABLE]; SYSTEM; mfu`: the row's MFU against the GEMM probe (a measured matmul rate, not
  a limit); `...; peak`: against the CPU's hardware peak (`bench.peak`), where the run recorded its clock.

The verdict word follows the rows' statistics (`bench.stats`): "ahead of" or "behind" only when every paired
repetition of every run named is on that side of 1.0, else "level with". So a claim cannot outlive a rerun
that disagrees with it, and naming the runs is how a quote says how many agree.

`problems(text, root)` lists every key whose figure is not the rendered one, every key that does not resolve,
and every figure left outside a key: a ratio (`1.23x`) anywhere, and a percentage or decimal number in a unit
(paragraph, list item, table row) that cites a run file, holds a key or speaks of MFU. `python -m bench.quotes
FILE...` prints the rendered figure of every key in the files (to write or update a quote).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from bench import peak
from bench import plan as P
from bench import stats
from bench.plan import Measurement

KEY = re.compile(r"<!--\s*bench:(.*?)-->", re.S)
RATIO = re.compile(r"(?<![\w.])\d+\.\d+x(?![\w])")
PERCENT = re.compile(r"(?<![\w.])\d+(?:\.\d+)?%")
DECIMAL = re.compile(r"(?<![\w.-])\d+\.\d+(?![\w.])")
CODE_SPAN = re.compile(r"`[^`\n]*`")
CITATION = re.compile(r"bench/results/([\w.-]+)\.(?:md|json)")
VERBS = {"ahead": "ahead of", "behind": "behind", "level": "level with"}
HERE = "\x00quote\x00"  # what a checked quote is replaced by before the unkeyed figures are looked for


class QuoteError(ValueError):
    """A key that names no run file, row or pair, or whose ratio makes no claim."""


def load_run(root: str, name: str) -> Tuple[List[Measurement], dict]:
    """(measurements, header) of bench/results/<name>.json under root."""
    from bench import run

    path = os.path.join(root, "bench", "results", name + ".json")
    if not os.path.exists(path):
        raise QuoteError(f"bench/results/{name}.json does not exist (only a run file's JSON can be quoted)")
    return run.load(path)


def _row(measurements: Sequence[Measurement], where: str, system: str) -> Measurement:
    group, _, table = (s.strip() for s in where.partition(":"))
    found = [m for m in measurements if m.group == group and m.system == system
             and (not table or table.lower() in P.table(m).lower())]
    if len(found) != 1:
        tables = sorted({P.table(m) for m in found})
        raise QuoteError(f"{len(found)} rows named {system!r} in {where!r}" + (f" (tables: {tables})" if found else ""))
    return found[0]


def _ratio_over_runs(runs: Sequence[Tuple[str, List[Measurement]]], where: str, ours: str, peer: str
                     ) -> List[stats.Ratio]:
    out = []
    for name, measurements in runs:
        a, b = _row(measurements, where, ours), _row(measurements, where, peer)
        # Rows are compared within a table; two settings of ours (packed against padded) on the same batches too.
        same_batches = P.is_ours(a) and P.is_ours(b) and a.kwargs.get("feed") == b.kwargs.get("feed")
        if a.precision != b.precision or (P.table(a) != P.table(b) and not same_batches):
            raise QuoteError(f"{name}: {ours!r} and {peer!r} are in different tables or precisions")
        r = stats.paired(a, b)
        if r.verdict == "too few repetitions":
            raise QuoteError(f"{name}: {ours} / {peer} has {r.n} paired repetitions: no claim")
        out.append(r)
    return out


def verdict_over_runs(ratios: Sequence[stats.Ratio]) -> str:
    """"ahead" or "behind" when every run reads so, else "level".

    >>> verdict_over_runs([stats.Ratio([1.1, 1.2, 1.3]), stats.Ratio([0.9, 1.1, 1.2])])
    'level'
    """
    verdicts = {r.verdict for r in ratios}
    return verdicts.pop() if verdicts in ({"ahead"}, {"behind"}) else "level"


def ratio_text(ours: str, peer: str, ratios: Sequence[stats.Ratio]) -> str:
    """The figure of a ratio quote over one or more runs.

    >>> ratio_text("a", "b", [stats.Ratio([1.2, 1.3, 1.25])])
    'a ahead of b: 1.25x (1.20-1.30x), one run'
    >>> ratio_text("a", "b", [stats.Ratio([0.95, 1.0, 1.03]), stats.Ratio([1.01, 1.05, 1.11])])
    'a level with b: 1.00-1.05x over 2 runs (1.00x, 1.05x; repetitions 0.95-1.11x)'
    """
    verb = VERBS[verdict_over_runs(ratios)]
    if len(ratios) == 1:
        r = ratios[0]
        return f"{ours} {verb} {peer}: {r.median:.2f}x ({r.low:.2f}-{r.high:.2f}x), one run"
    medians = [r.median for r in ratios]
    every = [v for r in ratios for v in r.values]
    return (f"{ours} {verb} {peer}: {min(medians):.2f}-{max(medians):.2f}x over {len(ratios)} runs ("
            + ", ".join(f"{m:.2f}x" for m in medians) + f"; repetitions {min(every):.2f}-{max(every):.2f}x)")


def verdicts_text(measurements: Sequence[Measurement]) -> str:
    """How many of a run's paired ratios read ahead, level and behind (those with too few repetitions apart)."""
    counts = {"ahead": 0, "level": 0, "behind": 0, "too few repetitions": 0}
    unlike = 0
    for a, b in P.pairs(measurements):
        r = stats.paired(a, b)
        if r.values:
            counts[r.verdict] += 1
            unlike += bool(P.unlike_work(a, b))
    total = counts["ahead"] + counts["level"] + counts["behind"]
    text = (f"{total} paired ratios, one run: ours ahead in {counts['ahead']}, level in {counts['level']}, "
            f"behind in {counts['behind']}")
    if unlike:
        text += f" ({unlike} of them against a row doing other work)"
    return text


def mfu_text(measurements: Sequence[Measurement], header: dict, where: str, system: str, against: str) -> str:
    """A row's MFU in one run: against the GEMM probe ("mfu") or the CPU's hardware peak ("peak")."""
    m = _row(measurements, where, system)
    r = peak.row_mfu(m, against, measurements, header)
    if not r.values:
        raise QuoteError(f"{system!r} in {where!r} has no MFU against the {against}")
    name = "the GEMM probe" if against == "mfu" else "the hardware peak"
    return (f"{system}: MFU {100 * r.median:.0f}% ({100 * r.low:.0f}-{100 * r.high:.0f}%) of {name}, one run")


# A study's per-round rates by the second field of its keys: "FILES; rounds; ..." quotes the study's main
# workload, "FILES; text rounds; ..." its real-text batch (`bench/studies/int8_serving.py`).
ROUND_METRICS = {"rounds": "seq_per_s", "text rounds": "text_seq_per_s"}


def load_round_study(root: str, name: str, metric: str = "seq_per_s") -> Dict[str, List[float]]:
    """system -> its rate in each interleaved round, from a study's bench/results/<name>.json that keeps them
    (`bench/studies/int8_serving.py`: {"results": {system: {"seq_per_s": [...], "text_seq_per_s": [...]}}})."""
    import json

    path = os.path.join(root, "bench", "results", name + ".json")
    if not os.path.exists(path):
        raise QuoteError(f"bench/results/{name}.json does not exist")
    with open(path, encoding="utf-8") as f:
        results = json.load(f).get("results")
    if not isinstance(results, dict) or not all(isinstance(r, dict) and metric in r for r in results.values()):
        raise QuoteError(f"bench/results/{name}.json keeps no per-round rates of {metric!r} (a study with rounds)")
    return {system: r[metric] for system, r in results.items()}


def _ratio_over_study_runs(root: str, names: Sequence[str], ours: str, peer: str,
                           metric: str = "seq_per_s") -> List[stats.Ratio]:
    out = []
    for name in names:
        rates = load_round_study(root, name, metric)
        for system in (ours, peer):
            if system not in rates:
                raise QuoteError(f"{name}: no row named {system!r} (rows: {sorted(rates)})")
        r = stats.Ratio([a / b for a, b in zip(rates[ours], rates[peer])])  # rounds are interleaved: paired
        if r.verdict == "too few repetitions":
            raise QuoteError(f"{name}: {ours} / {peer} has {r.n} paired rounds: no claim")
        out.append(r)
    return out


def render_key(key: str, root: str) -> str:
    """The figure the key `bench: ...` stands for (QuoteError when it names nothing that can be quoted)."""
    fields = [f.strip() for f in key.split(";")]
    names = [n.strip() for n in fields[0].split(",") if n.strip()]
    if not names:
        raise QuoteError(f"no run file named in {key!r}")
    if len(fields) == 3 and fields[1] in ROUND_METRICS and " / " in fields[2]:
        ours, peer = (s.strip() for s in fields[2].split(" / ", 1))
        return ratio_text(ours, peer, _ratio_over_study_runs(root, names, ours, peer, ROUND_METRICS[fields[1]]))
    loaded = [load_run(root, name) for name in names]
    runs = [(name, measurements) for name, (measurements, _) in zip(names, loaded)]
    if len(fields) == 2 and fields[1] == "verdicts" and len(runs) == 1:
        return verdicts_text(runs[0][1])
    if len(fields) == 4 and fields[3] in ("mfu", "peak") and len(runs) == 1:
        return mfu_text(loaded[0][0], loaded[0][1], fields[1], fields[2], fields[3])
    if len(fields) == 3 and " / " in fields[2]:
        ours, peer = (s.strip() for s in fields[2].split(" / ", 1))
        return ratio_text(ours, peer, _ratio_over_runs(runs, fields[1], ours, peer))
    raise QuoteError(f"cannot read the key {key!r}: expected 'FILES; GROUP; OURS / PEER', 'FILES; [text ]rounds; "
                     "OURS / PEER', 'FILE; verdicts' or 'FILE; GROUP; SYSTEM; mfu' (or peak)")


# ------------------------------------------------------------- documents
def units(text: str) -> List[str]:
    """The document's table rows, list items and paragraphs (fenced code blocks left out).

    >>> units("a 1.2x\\nb\\n\\n- c\\n- d\\n| e |\\n```\\nf 9.9x\\n```\\ng")
    ['a 1.2x\\nb', '- c', '- d', '| e |', 'g']
    """
    out, current, fenced = [], [], False

    def close():
        if current:
            out.append("\n".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
            continue
        if fenced:
            continue
        if not stripped or stripped.startswith("#"):
            close()
        elif stripped.startswith("|") or re.match(r"([-*]|\d+\.)\s", stripped):
            close()
            current.append(line)
            if stripped.startswith("|"):
                close()
        else:
            current.append(line)
    close()
    return out


def _check_keys(unit: str, root: str, out: List[str]) -> str:
    """The unit with every key and its figure replaced by HERE; a problem for each wrong or unreadable key."""
    pieces, last = [], 0
    for match in KEY.finditer(unit):
        pieces.append(unit[last:match.start()])
        key, after = " ".join(match.group(1).split()), unit[match.end():]
        try:
            want = render_key(key, root)
        except QuoteError as e:
            out.append(f"bench:{key}: {e}")
            want = None
        if want is not None and not after.startswith(want):
            out.append(f"bench:{key}: the figure must read {want!r}, not {after[:len(want)]!r}")
            want = None
        pieces.append(HERE)
        last = match.end() + (len(want) if want is not None else 0)
    return "".join(pieces) + unit[last:]


def _cites_a_run(unit: str, root: str) -> bool:
    return any(os.path.exists(os.path.join(root, "bench", "results", name + ".json"))
               for name in CITATION.findall(unit))


def problems(text: str, root: str) -> List[str]:
    """One line per wrong or unreadable key and per benchmark figure that no key stands for."""
    out: List[str] = []
    for cited in units(text):
        unit = CODE_SPAN.sub("``", cited)  # `python -m bench.run --reps 5`: a command, not a figure
        rest = _check_keys(unit, root, out)
        loose = RATIO.findall(rest)
        if HERE in rest or _cites_a_run(cited, root) or "MFU" in rest:
            loose += PERCENT.findall(rest) + DECIMAL.findall(RATIO.sub("", PERCENT.sub("", rest)))
        if loose:
            out.append(f"{', '.join(loose)} not tied to a run file's JSON by a <!-- bench: ... --> key: "
                       f"{unit.strip()[:120]!r}")
    return out


def main(argv: Sequence[str]) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in argv:
        with open(path, encoding="utf-8") as f:
            for match in KEY.finditer(f.read()):
                key = " ".join(match.group(1).split())
                try:
                    print(f"<!-- bench: {key.strip()} -->{render_key(key, root)}")
                except QuoteError as e:
                    print(f"bench:{key}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
