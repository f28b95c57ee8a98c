"""bench.studies.serving_nodes: the encoder's parts from both runtimes' node types, ONNX Runtime's profile
split into calls, the sums and rates against hand-worked figures, and a tiny run of the three systems."""

import json
import os

import pytest

from bench.studies import serving_nodes as sn


@pytest.mark.parametrize("runtime, op, shapes, part", [
    ("openvino", "FullyConnected", (), "dense"),
    ("openvino", "Subgraph", (), "fused subgraph"),
    ("openvino", "Softmax", (), "attention"),
    ("openvino", "MVN", (), "layer norm"),
    ("openvino", "Gather", (), "gather"),
    ("openvino", "Reorder", (), "layout"),
    ("openvino", "SomethingNew", (), "other"),
    ("onnxruntime", "MatMul", ([1, 128, 768], [768, 768]), "dense"),
    ("onnxruntime", "FusedMatMul", ([1, 12, 128, 64], [1, 12, 64, 128]), "attention"),
    ("onnxruntime", "Gemm", ([1, 768], [768, 768]), "dense"),
    ("onnxruntime", "MatMul", ([1, 128, 768],), "dense"),  # the profile leaves the weight (an initializer) out
    ("onnxruntime", "FusedGemm", ([1, 768],), "dense"),
    ("onnxruntime", "MatMul", ([1, 12, 128, 128], [1, 12, 128, 64]), "attention"),
    ("onnxruntime", "SkipLayerNormalization", (), "layer norm"),
    ("onnxruntime", "FastGelu", (), "elementwise"),
    ("onnxruntime", "Transpose", (), "layout"),
])
def test_each_runtimes_node_types_fall_in_the_encoders_parts(runtime, op, shapes, part):
    assert sn.category(runtime, op, shapes) == part


def test_an_unknown_runtime_is_refused_by_name():
    with pytest.raises(ValueError, match="'tvm'"):
        sn.category("tvm", "MatMul")


def _run(ts, dur):
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}


def _node(op, ts, dur, shapes=(), suffix="_kernel_time"):
    return {"cat": "Node", "name": f"{op}{suffix}", "ts": ts, "dur": dur,
            "args": {"op_name": op, "input_type_shape": [{"float": list(s)} for s in shapes]}}


def test_the_profile_is_split_into_calls_and_the_warm_up_left_out():
    events = [
        _run(0, 100), _node("MatMul", 10, 50, ([2, 4], [4, 4])),  # warm-up call
        _run(200, 100), _node("MatMul", 210, 40, ([2, 4], [4, 4])), _node("MatMul", 210, 0, suffix="_fence_before"),
        _node("Softmax", 260, 5),
        _run(400, 100), _node("MatMul", 450, 30, ([1, 2, 4, 4], [1, 2, 4, 4])),
        _node("Add", 600, 7),  # outside every run: not counted
        {"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 9},
    ]
    assert sn.onnxruntime_calls(events, skip=1) == [
        [("dense", "MatMul", 40.0), ("attention", "Softmax", 5.0)],
        [("attention", "MatMul", 30.0)]]


def test_the_summary_takes_medians_of_per_call_sums_and_the_dense_rate_from_their_time():
    # ours: dense 10, 12, 20 ms (median 12); ort: dense 8 ms in every call, an Add of 1 ms in the first only.
    ours = [[("dense", "FullyConnected", 10000.0)], [("dense", "FullyConnected", 12000.0)],
            [("dense", "FullyConnected", 20000.0)]]
    ort = [[("dense", "MatMul", 8000.0), ("elementwise", "Add", 1000.0)], [("dense", "MatMul", 8000.0)],
           [("dense", "MatMul", 8000.0)]]
    s = sn.summarize({"ours": ours, "ort": ort}, {"ours": [11.0, 13.0, 25.0], "ort": [9.0, 9.5, 8.5]}, flops=2.4e9)
    assert s["wall_ms"] == {"ours": 13.0, "ort": 9.0}
    assert s["node_ms"] == {"ours": 12.0, "ort": 8.0}  # ort's call sums 9, 8, 8
    assert s["categories"]["dense"] == {"ours": {"ms": 12.0, "nodes": 1}, "ort": {"ms": 8.0, "nodes": 1}}
    assert s["categories"]["elementwise"] == {"ort": {"ms": 0.0, "nodes": 1}}
    assert s["dense_gflops"] == {"ours": pytest.approx(200.0), "ort": pytest.approx(300.0)}  # 2.4 GFLOP / 12, 8 ms
    text = sn.render(s, dict(command="cmd", date="d", cpu="c", threads=2, batch=1, seq=128, rounds=3, calls=1))
    assert "| our OpenVINO export | 13.0 | 12.0 | 200.0 |" in text
    assert "| dense | 12.00 (1) | 8.00 (1) | +4.00 |" in text
    assert "| elementwise | - | 0.00 (1) | +0.00 |" in text


def test_a_tiny_run_profiles_the_three_systems(tmp_path, monkeypatch):
    for name in ("openvino", "onnxruntime", "torch", "transformers", "onnx"):
        pytest.importorskip(name)
    monkeypatch.setenv("BENCH_THREADS", "1")
    out = str(tmp_path / "nodes")
    sn.main(["--shape", "tiny", "--batch", "1", "--seq", "16", "--rounds", "3", "--calls", "2",
             "--cache_dir", str(tmp_path / "cache"), "--output", out])
    with open(out + ".json", encoding="utf-8") as f:
        result = json.load(f)
    summary = result["summary"]
    for system in sn.SYSTEMS:
        assert len(result["walls_ms"][system]) == 6
        # Every system multiplies its weights: each has dense nodes with a time and a rate.
        assert summary["categories"]["dense"][system]["nodes"] > 0, system
        assert summary["dense_gflops"][system] > 0, system
    assert os.path.exists(out + ".md")
