"""bench.studies.openvino_layers: its sums of OpenVINO's per-node times, and a tiny run of both graphs."""

import datetime
import enum
import json
import os
from types import SimpleNamespace

import pytest

from bench.studies import openvino_layers as ovl


class _Status(enum.Enum):  # as openvino's ProfilingInfo.Status prints: "Status.EXECUTED"
    EXECUTED = 1
    NOT_RUN = 2
    OPTIMIZED_OUT = 3


def _node(kind, kernel, us, status=_Status.EXECUTED):
    return SimpleNamespace(node_type=kind, exec_type=kernel, real_time=datetime.timedelta(microseconds=us),
                           status=status)


def test_only_executed_nodes_count_with_their_microseconds():
    info = [_node("FullyConnected", "brgemm_avx512_bf16", 1500), _node("Reshape", "unknown", 0, _Status.NOT_RUN),
            _node("Convert", "ref", 99, _Status.OPTIMIZED_OUT), _node("MVN", "jit_avx512", 250)]
    assert ovl.executed_nodes(info) == [("FullyConnected", "brgemm_avx512_bf16", 1500.0), ("MVN", "jit_avx512", 250.0)]


def test_summary_takes_per_call_sums_then_medians_for_each_model():
    # ours: 3 calls whose MatMul sums are 2, 4 and 3 ms (median 3), one Eltwise of 1 ms in the first call only
    # (median over calls 0); HF: MatMul 1, 1, 5 ms (median 1).
    ours = [[("MatMul", "a", 1000.0), ("MatMul", "a", 1000.0), ("Eltwise", "e", 1000.0)],
            [("MatMul", "a", 4000.0)], [("MatMul", "b", 3000.0)]]
    hf = [[("MatMul", "a", 1000.0)], [("MatMul", "a", 1000.0)], [("MatMul", "a", 5000.0)]]
    s = ovl.summarize({"ours": ours, "hf": hf}, {"ours": [10.0, 12.0, 11.0], "hf": [9.0, 30.0, 8.0]})
    assert s["wall_ms"] == {"ours": 11.0, "hf": 9.0}
    assert s["node_ms"] == {"ours": 3.0, "hf": 1.0}  # call totals 3, 4, 3 and 1, 1, 5
    assert s["types"]["MatMul"]["ours"] == {"ms": 3.0, "nodes": 2}  # node count from the first call
    assert s["types"]["MatMul"]["hf"] == {"ms": 1.0, "nodes": 1}
    assert s["types"]["Eltwise"] == {"ours": {"ms": 0.0, "nodes": 1}, "hf": {"ms": 0.0, "nodes": 0}}
    assert s["kernels"]["MatMul / a"]["ours"]["ms"] == 2.0  # 2, 4, 0 ms
    text = ovl.render(s, dict(command="cmd", date="d", cpu="c", threads=2, precision="bfloat16", batch=1, seq=2,
                              rounds=1, calls=3))
    assert "| MatMul | 3.00 (2) | 1.00 (1) | +2.00 |" in text
    assert "(ours / HF 1.222)" in text


def test_a_tiny_run_profiles_both_graphs(tmp_path, monkeypatch):
    for name in ("openvino", "torch", "transformers", "onnx"):
        pytest.importorskip(name)
    monkeypatch.setenv("BENCH_THREADS", "1")
    out = str(tmp_path / "layers")
    ovl.main(["--shape", "tiny", "--batch", "2", "--seq", "16", "--rounds", "2", "--calls", "1",
              "--cache_dir", str(tmp_path / "cache"), "--output", out])
    with open(out + ".json", encoding="utf-8") as f:
        result = json.load(f)
    summary = result["summary"]
    assert result["settings"]["threads"] == 1
    for model in ovl.MODELS:
        assert len(result["walls_ms"][model]) == 2
        # Per-node timers include their own overheads, so their sum is not bounded by the wall time.
        assert summary["node_ms"][model] > 0 and min(result["walls_ms"][model]) > 0
        # Both graphs multiply matrices: some node type of each holds the encoder's matmuls.
        kinds = {k for k, v in summary["types"].items() if v[model]["nodes"]}
        assert kinds & {"FullyConnected", "MatMul", "Subgraph", "ScaledDotProductAttention"}, kinds
    assert os.path.exists(out + ".md")
