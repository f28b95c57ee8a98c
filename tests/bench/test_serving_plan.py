"""The serving plan: one request at a time (p50/p90/p99 of the calls) for every serving system, and the sweep
of batch sizes and lengths; their sections of the run file, checked against hand-worked percentiles."""

from __future__ import annotations

import pytest

from bench import plan as P
from bench import report, stats


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_every_serving_system_of_the_inference_table_answers_one_request_at_a_time(precision):
    rows = P.plan("serving", "sp.model", "pool.json", precision)
    latency = [m for m in rows if m.group == "latency"]
    infer = [m for m in P.plan("default", "sp.model", "pool.json", precision) if m.group == "infer"]
    assert {m.system for m in latency} == {m.system for m in infer}  # ours and every peer, at their best too
    assert {(m.kwargs["batch"], m.kwargs["seq"], m.kwargs["steps"]) for m in latency} == {(1, 128, 100)}
    assert {m.precision for m in rows} == {precision}
    # Each of ours meets each peer in the table, but for ours with XLA and keras-hub without it.
    ours, peers = [m for m in latency if P.is_ours(m)], [m for m in latency if not P.is_ours(m)]
    assert len(ours) == (4 if precision == "float32" else 3) and len(peers) >= 5
    assert {(a.system, b.system) for a, b in P.pairs(latency)} == {
        (a.system, b.system) for a in ours for b in peers} - {(P.INFER_XLA, "keras-hub")}


@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_sweep_covers_batch_1_8_32_by_length_64_128_512_with_the_leading_peers(precision):
    sweep = [m for m in P.plan("serving", "sp.model", "pool.json", precision) if m.group == "sweep"]
    tables = {}
    for m in sweep:
        tables.setdefault(P.table(m), set()).add(m.system)
    assert sorted(tables) == sorted(f"batch {b}, length {s}" for b in (1, 8, 32) for s in (64, 128, 512))
    peers = {P.OPENVINO_FROM_TORCH} | ({P.ONNXRUNTIME_FUSED} if precision == "float32" else set())
    assert all(systems == {P.OURS, P.OURS_OPENVINO} | peers for systems in tables.values())
    for m in sweep:  # every row of a table times about the same tokens
        tokens = m.kwargs["batch"] * m.kwargs["seq"] * m.kwargs["steps"]
        assert m.kwargs["steps"] in (3, 50) or 0.5 * 20480 <= tokens <= 20480


def test_call_percentiles_interpolate_between_the_sorted_calls():
    m = P.Measurement("latency", "x", "ours", "infer", {})
    m.runs = [{"rep": 0, "samples_s": [0.004, 0.001, 0.003, 0.002, 0.005]},  # sorted: 1..5 ms
              {"rep": 2, "samples_s": [0.010] * 9 + [0.110]}]
    assert stats.call_percentile_ms(m, 50) == pytest.approx({0: 3.0, 2: 10.0})
    # p90 of 1..5 ms: position 0.9 x 4 = 3.6 -> 4 + 0.6 x (5 - 4); of nine 10s and a 110: position 8.1.
    assert stats.call_percentile_ms(m, 90) == pytest.approx({0: 4.6, 2: 20.0})
    assert stats.call_percentile_ms(P.Measurement("latency", "y", "hf", "infer", {}), 50) == {}


def _latency_row(system, module, samples_per_rep, **kwargs):
    m = P.Measurement("latency", system, module, "infer",
                      dict(precision="float32", batch=1, seq=128, warmup=5, steps=100, **kwargs))
    m.runs = [dict(per_s=1 / sorted(s)[len(s) // 2], samples_s=s, peak_rss_mb=500.0, rep=i)
              for i, s in enumerate(samples_per_rep)]
    return m


def test_the_latency_section_shows_p50_p90_p99_over_repetitions_and_paired_ratios():
    ours = _latency_row(P.OURS_OPENVINO, "ours_openvino", [[0.010] * 99 + [0.030]] * 2 + [[0.012] * 100])
    peer = _latency_row(P.ONNXRUNTIME, "onnx_runtimes", [[0.020] * 100] * 3, runtime="onnxruntime")
    header = dict(command="python -m bench.run --plan serving", date="today", minutes=1.0, load_start=0.5,
                  load_end=0.6, cpu={"model": "Test CPU", "cores": 2, "flags": ["avx2"]}, plan="serving",
                  versions={}, reps=3, threads=2)
    text = report.render([ours, peer], header)
    assert "## One request at a time (milliseconds per call, batch 1, length 128)" in text
    # p50: 10, 10, 12 ms -> 10.0 (10.0-12.0); p99 of 99 x 10 ms and one 30 ms call: position 98.01 -> 10.2 ms.
    assert (f"| {P.OURS_OPENVINO} | openvino | float32 | 10.0 (10.0-12.0) | 10.0 (10.0-12.0) | "
            "10.2 (10.2-12.0) | 500 |") in text
    assert "| ONNX Runtime (HF model, ONNX) | onnxruntime | float32 | 20.0 (20.0-20.0) |" in text
    # The median call's rate: 20/10, 20/10, 20/12 -> 2.00x (1.67-2.00x), ours ahead.
    assert "| **2.00x** (1.67-2.00x) | 3 | ours ahead |" in text


def test_the_sweep_section_has_a_table_per_batch_and_length():
    rows = []
    for batch, seq, rate in ((1, 64, 50.0), (32, 512, 2.0)):
        kw = dict(precision="float32", batch=batch, seq=seq, warmup=2, steps=P.sweep_steps(batch, seq))
        for system, module, factor in ((P.OURS, "ours", 1.0), (P.OPENVINO_FROM_TORCH, "onnx_runtimes", 0.8)):
            m = P.Measurement("sweep", system, module, "infer", dict(kw, **({"xla": False} if module == "ours"
                                                                             else {"runtime": "openvino"})))
            m.runs = [dict(per_s=rate * factor, rep=r) for r in range(3)]
            rows.append(m)
    header = dict(command="c", date="d", minutes=1.0, load_start=0.1, load_end=0.1, plan="serving", versions={},
                  cpu={"model": "Test CPU", "cores": 2, "flags": ["avx2"]}, reps=3, threads=2)
    text = report.render(rows, header)
    assert "## Serving sweep" in text and "### Batch 1, length 64" in text and "### Batch 32, length 512" in text
    assert text.count("| **1.25x** (1.25-1.25x) | 3 | ours ahead |") == 2
