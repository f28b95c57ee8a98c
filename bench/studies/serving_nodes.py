"""Where does ONNX Runtime gain on our OpenVINO export (issue 33: float serving against the best peer)?

Study (2026-12-06). Question: on a CPU kind where ONNX Runtime serves ALBERT-base faster than our OpenVINO export
(`albert-export --format=openvino`), in which part of the encoder is the time lost: the dense layers (the
matrix multiplications with a weight), attention, LayerNorm, the embeddings' and packing's gathers, the
elementwise work or layout changes? Answer: on the AVX2 kind (float32, batch 1 x 128), in the dense layers only
(bench/results/serving_nodes_avx2_before.md): OpenVINO ran the matmuls with a fused post-op (the FFN's tanh
GELU, attention's 1/8 scale moved onto the key projection) on its brgemm kernel, and the plain ones on MLAS,
148 GFLOP/s in all against ONNX Runtime's 168; every other part cost us less than ONNX Runtime. The export now
folds the scale into the query weights and computes the GELU in a form OpenVINO leaves outside the matmul
(`albert_tf.layers.fused`), so every projection runs on MLAS (`serving_nodes_avx2.md`: after). Command:
`python -m bench.studies.serving_nodes --batch 1 --seq 128 --rounds 6 --calls 5`.

Both runtimes profile every executed node: OpenVINO with `PERF_COUNT` (as bench/studies/openvino_layers.py),
ONNX Runtime with its session profiler. Nodes are put in those categories (`category`), because the graphs'
node types differ (OpenVINO's FullyConnected is ONNX Runtime's MatMul with a weight; ONNX Runtime fuses
LayerNorm with the residual Add). The dense layers' rate, GFLOP/s from the encoder's dense FLOPs
(`dense_flops`) over their summed time, says whether a gap is the GEMM kernels' or the rest of the graph's.

The models are the suite's (ALBERT-base, seed-0 random weights, cached in the bench folder): our export of the ids
model, and Hugging Face's AlbertModel exported to ONNX, run by ONNX Runtime plainly and after
`onnxruntime.transformers`' fusions; compiled and threaded as the suite runs them (float32, LATENCY hint,
the suite's threads). Rounds interleave the systems (the order turns every round); medians over calls.

    python -m bench.studies.serving_nodes --batch 1 --seq 128 --rounds 6 --calls 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from bench.studies import openvino_layers

SYSTEMS = ("ours", "ort", "ort_fused")
TITLES = {"ours": "our OpenVINO export", "ort": "ONNX Runtime (HF model)",
          "ort_fused": "ONNX Runtime, transformer fusions (HF model)"}
CATEGORIES = ("dense", "attention", "layer norm", "gather", "elementwise", "layout", "fused subgraph", "other")
RESULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "serving_nodes")

# One executed node of one call: (category, op type, microseconds).
Node = Tuple[str, str, float]

_OPENVINO = {
    "FullyConnected": "dense",
    "MatMul": "attention", "Softmax": "attention", "ScaledDotProductAttention": "attention",
    "Select": "attention", "IsNaN": "attention",
    "MVN": "layer norm", "NormalizeL2": "layer norm",
    "Gather": "gather", "GatherND": "gather", "GatherElements": "gather",
    "Eltwise": "elementwise", "Add": "elementwise", "Multiply": "elementwise", "Subtract": "elementwise",
    "Divide": "elementwise", "PowerStatic": "elementwise", "Power": "elementwise", "Gelu": "elementwise",
    "Tanh": "elementwise", "Erf": "elementwise", "Sqrt": "elementwise", "Convert": "elementwise",
    "Transpose": "layout", "Reorder": "layout", "Reshape": "layout", "Concat": "layout", "Squeeze": "layout",
    "Unsqueeze": "layout", "StridedSlice": "layout", "Slice": "layout", "Broadcast": "layout", "Pad": "layout",
    "Subgraph": "fused subgraph",
}
_ONNXRUNTIME = {
    "Softmax": "attention", "Attention": "attention", "MultiHeadAttention": "attention", "Where": "attention",
    "IsNaN": "attention",
    "LayerNormalization": "layer norm", "SkipLayerNormalization": "layer norm",
    "SimplifiedLayerNormalization": "layer norm", "SkipSimplifiedLayerNormalization": "layer norm",
    "Gather": "gather", "GatherElements": "gather", "GatherND": "gather", "EmbedLayerNormalization": "gather",
    "Add": "elementwise", "Mul": "elementwise", "Sub": "elementwise", "Div": "elementwise", "Pow": "elementwise",
    "Sqrt": "elementwise", "Erf": "elementwise", "Tanh": "elementwise", "Gelu": "elementwise",
    "FastGelu": "elementwise", "BiasGelu": "elementwise", "Cast": "elementwise", "Not": "elementwise",
    "Equal": "elementwise", "ReduceMean": "layer norm",
    "Transpose": "layout", "Reshape": "layout", "Concat": "layout", "Squeeze": "layout", "Unsqueeze": "layout",
    "Slice": "layout", "Expand": "layout", "Shape": "layout",
}
_MATMULS = ("MatMul", "Gemm", "FusedGemm", "FusedMatMul", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat")


def category(runtime: str, op_type: str, input_shapes: Sequence[Sequence[int]] = ()) -> str:
    """The part of the encoder a node belongs to: one of CATEGORIES.

    ONNX Runtime's matrix products are "attention" when their second input is an activation of rank 3 or more
    (queries x keys, probabilities x values), else "dense": its profile lists the shapes of activations only,
    so a product with a weight shows one input (or a 2-D second one).

    >>> category("openvino", "FullyConnected"), category("openvino", "MVN")
    ('dense', 'layer norm')
    >>> category("onnxruntime", "MatMul", [[1, 128, 768]])
    'dense'
    >>> category("onnxruntime", "MatMul", [[1, 12, 128, 64], [1, 12, 64, 128]])
    'attention'
    """
    if runtime == "openvino":
        return _OPENVINO.get(op_type, "other")
    if runtime != "onnxruntime":
        raise ValueError(f"runtime must be 'openvino' or 'onnxruntime', got {runtime!r}.")
    if op_type in _MATMULS:
        return "attention" if len(input_shapes) > 1 and len(input_shapes[1]) > 2 else "dense"
    return _ONNXRUNTIME.get(op_type, "other")


def onnxruntime_calls(events: Sequence[dict], skip: int = 0) -> List[List[Node]]:
    """The nodes of every `model_run` in an ONNX Runtime profile (its JSON event list), after the first `skip`.

    A node belongs to the run whose time span holds its start; its input shapes (`input_type_shape`, one
    {dtype: shape} per input) decide the matrix products' category.

    >>> run = {"cat": "Session", "name": "model_run", "ts": 100, "dur": 50}
    >>> node = {"cat": "Node", "name": "m_kernel_time", "ts": 110, "dur": 30,
    ...         "args": {"op_name": "MatMul", "input_type_shape": [{"float": [1, 4, 8]}, {"float": [8, 8]}]}}
    >>> onnxruntime_calls([run, node])
    [[('dense', 'MatMul', 30.0)]]
    """
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    calls: List[List[Node]] = [[] for _ in runs]
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        shapes = [list(s.values())[0] for s in args.get("input_type_shape", []) if s]
        node = (category("onnxruntime", args.get("op_name", ""), shapes), args.get("op_name", ""),
                float(e["dur"]))
        for i, (start, end) in enumerate(runs):
            if start <= e["ts"] <= end:
                calls[i].append(node)
                break
    return calls[skip:]


def openvino_call(profiling_info) -> List[Node]:
    """One OpenVINO call's executed nodes (`request.get_profiling_info()`) with their categories."""
    return [(category("openvino", kind), kind, us) for kind, _, us in openvino_layers.executed_nodes(profiling_info)]


def dense_flops(config, batch: int, seq: int) -> float:
    """FLOPs of the encoder's dense layers for one call: the embedding projection, every layer's Q, K, V,
    attention output and two FFN products, and the pooler (2 x m x k x n each).

    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(embedding_size=2, hidden_size=4, intermediate_size=8, num_hidden_layers=1)
    >>> dense_flops(c, batch=1, seq=3)  # 2*3*(2*4 + 4*4*4 + 2*4*8) + 2*1*4*4
    848.0
    """
    h, i, e = config.hidden_size, config.intermediate_size, config.embedding_size
    per_token = e * h + config.num_hidden_layers * (4 * h * h + 2 * h * i)
    return 2.0 * batch * seq * per_token + 2.0 * batch * h * h


def summarize(calls: Dict[str, List[List[Node]]], walls: Dict[str, List[float]],
              flops: float) -> Dict[str, object]:
    """Medians over calls of each system: wall ms, summed node ms, ms and node count per category and per op
    type, and the dense layers' GFLOP/s."""
    out: Dict[str, object] = {"wall_ms": {}, "node_ms": {}, "categories": {}, "ops": {}, "dense_gflops": {}}
    for system, system_calls in calls.items():
        out["wall_ms"][system] = statistics.median(walls[system])
        out["node_ms"][system] = statistics.median(sum(n[2] for n in c) / 1000.0 for c in system_calls)
        for name, key in (("categories", lambda n: n[0]), ("ops", lambda n: f"{n[0]}: {n[1]}")):
            sums = openvino_layers.per_call_sums(system_calls, key)
            counts = openvino_layers.node_counts(system_calls[0], key)
            for k, ms in sums.items():
                out[name].setdefault(k, {})[system] = {"ms": statistics.median(ms), "nodes": counts.get(k, 0)}
        dense_ms = out["categories"].get("dense", {}).get(system, {}).get("ms", 0.0)
        out["dense_gflops"][system] = flops / (dense_ms / 1000.0) / 1e9 if dense_ms else None
    return out


def render(summary: Dict[str, object], settings: Dict[str, object], top_ops: int = 12) -> str:
    """The study's markdown: settings, each system's wall and node time, the categories, the op types that
    differ most between our export and plain ONNX Runtime."""
    systems = [s for s in SYSTEMS if s in summary["wall_ms"]]
    wall, node, rate = summary["wall_ms"], summary["node_ms"], summary["dense_gflops"]
    lines = [
        "# Our OpenVINO export against ONNX Runtime, per part of the encoder",
        "",
        f"`{settings['command']}` ({settings['date']}, {settings['cpu']}; {settings['threads']} threads, float32, "
        f"batch {settings['batch']} x {settings['seq']} tokens, {settings['rounds']} rounds x {settings['calls']} "
        f"calls per system, medians over calls).",
        "",
        "| system | wall ms per call | summed node ms | dense layers GFLOP/s |",
        "|---|---:|---:|---:|",
    ]
    for s in systems:
        gflops = f"{rate[s]:.1f}" if rate.get(s) else "-"
        lines.append(f"| {TITLES[s]} | {wall[s]:.1f} | {node[s]:.1f} | {gflops} |")

    def cell(entry, s):
        v = entry.get(s)
        return f"{v['ms']:.2f} ({v['nodes']})" if v else "-"

    def ms(entry, s):
        return entry.get(s, {}).get("ms", 0.0)

    head = " | ".join(f"{TITLES[s]} ms (nodes)" for s in systems)
    lines += ["", f"| part | {head} | ours - ONNX Runtime ms |", "|---|" + "---:|" * (len(systems) + 1)]
    cats = summary["categories"]
    for c in [c for c in CATEGORIES if c in cats]:
        lines.append(f"| {c} | " + " | ".join(cell(cats[c], s) for s in systems)
                     + f" | {ms(cats[c], 'ours') - ms(cats[c], 'ort'):+.2f} |")
    ops = summary["ops"]
    order = sorted(ops, key=lambda k: -abs(ms(ops[k], "ours") - ms(ops[k], "ort")))[:top_ops]
    lines += ["", f"The {top_ops} op types that differ most between ours and plain ONNX Runtime:", "",
              f"| part: op type | {head} |", "|---|" + "---:|" * len(systems)]
    lines += [f"| {k} | " + " | ".join(cell(ops[k], s) for s in systems) + " |" for k in order]
    return "\n".join(lines) + "\n"


def _sessions(shape: str, cache_dir: str, profile_dir: str):
    """Our export's infer request (compiled with PERF_COUNT) and the two ONNX Runtime sessions (profiling on),
    by system name."""
    import onnxruntime as ort

    from bench.systems import hf, onnx_runtimes, threads

    paths = openvino_layers._models(shape, cache_dir)
    request = openvino_layers._compiled(paths["ours"], "float32", "LATENCY")
    sessions = {}
    for system, path in (("ort", paths["hf"]), ("ort_fused", onnx_runtimes._fused(paths["hf"], hf._config(shape=shape)))):
        options = threads.session_options()
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(profile_dir, system)
        sessions[system] = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return request, sessions


def measure(batch: int, seq: int, rounds: int, calls: int, shape: str, cache_dir: str,
            warmup: int = 2) -> Tuple[Dict[str, List[List[Node]]], Dict[str, List[float]]]:
    """Interleaved rounds of the three systems: every timed call's nodes and wall ms."""
    from bench.systems import common, onnx_runtimes

    ex = common.synthetic_pretraining_batch(batch, seq, 1, common.shape_dims(shape)["vocab_size"])
    ours_feeds = {k: ex[k].astype("int32") for k in ("input_ids", "input_mask", "segment_ids")}
    ort_feeds = onnx_runtimes._feeds(ex)
    nodes: Dict[str, List[List[Node]]] = {s: [] for s in SYSTEMS}
    walls: Dict[str, List[float]] = {s: [] for s in SYSTEMS}
    with tempfile.TemporaryDirectory() as profile_dir:
        request, sessions = _sessions(shape, cache_dir, profile_dir)
        run = {"ours": lambda: request.infer(ours_feeds),
               **{s: (lambda sess=sess: sess.run(list(onnx_runtimes.OUTPUTS), ort_feeds))
                  for s, sess in sessions.items()}}
        for s in SYSTEMS:  # warm-up: the first calls compile kernels for the shape
            for _ in range(warmup):
                run[s]()
        for r in range(rounds):
            order = SYSTEMS[r % len(SYSTEMS):] + SYSTEMS[:r % len(SYSTEMS)]
            for s in (order if r % 2 == 0 else order[::-1]):
                for _ in range(calls):
                    start = time.perf_counter()
                    run[s]()
                    walls[s].append((time.perf_counter() - start) * 1000.0)
                    if s == "ours":
                        nodes[s].append(openvino_call(request.get_profiling_info()))
        for s, sess in sessions.items():
            with open(sess.end_profiling(), encoding="utf-8") as f:
                nodes[s] = onnxruntime_calls(json.load(f), skip=warmup)
    return nodes, walls


def main(argv=None) -> None:
    from bench.systems import common, hf, threads

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=5, help="timed calls per system per round")
    p.add_argument("--shape", default="base", choices=("base", "tiny"))
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "albert-tf-bench"))
    p.add_argument("--output", default=None,
                   help="written as OUTPUT.md and OUTPUT.json (default bench/results/serving_nodes_<cpu-kind>)")
    args = p.parse_args(argv)
    if args.threads:
        os.environ[threads.ENV] = str(args.threads)
    args.output = args.output or f"{RESULT}_{common.cpu_kind()}"
    nodes, walls = measure(args.batch, args.seq, args.rounds, args.calls, args.shape, args.cache_dir)
    summary = summarize(nodes, walls, dense_flops(hf._config(shape=args.shape), args.batch, args.seq))
    settings = openvino_layers.study_settings(args, "serving_nodes")
    openvino_layers.write_result(args.output, render(summary, settings), settings, summary, walls)


if __name__ == "__main__":
    main()
