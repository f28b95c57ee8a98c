"""Where does our OpenVINO export spend its time, against OpenVINO running Hugging Face's graph (issue 27, item 6)?

Study (2026-12-03). Question: at full length, in which of OpenVINO's runtime node types does our export
(`albert-export --format=openvino`, ids model) spend more time than Hugging Face's AlbertModel exported to ONNX,
both compiled alike? Answer: on AMD EPYC without AMX (bf16, batch 32 x 128), the dense layers take about 85% of
both graphs and run the same kernels; our fused attention (one Subgraph per layer) costs less than Hugging
Face's MatMul, Softmax, Select, IsNaN and Transpose nodes; our LayerNorm ran as about ten elementwise nodes
(ReduceMean, SquaredDifference, Power, Multiply, Add) where Hugging Face's graph runs one MVN op, and the
packing's four Gathers per layer are pure cost at full length. The export now traces LayerNorm in the form
OpenVINO fuses into MVN (`albert_tf.layers.fused.apply_layer_norm`); the Gathers remain
(bench/results/openvino_layers_avx512-bf16.md, and `_before_mvn.md` for the graph before). Command: `python -m
bench.studies.openvino_layers --batch 32 --seq 128 --rounds 5 --calls 4`.

Both models are the suite's (`bench.systems.ours_openvino.export` and
`bench.systems.onnx_runtimes.export_onnx`: ALBERT-base, seed-0 random weights,
cached in the bench folder) and are compiled with the suite's settings
(LATENCY, bf16 or f32 inference precision, the suite's threads) plus
`PERF_COUNT`. Each round runs `--calls` timed calls of one model, then of the
other (the order alternates per round); after every call OpenVINO's profiling
info gives each executed runtime node's `real_time`. The table sums it per
node type (FullyConnected, MatMul, Eltwise, Subgraph, Reorder, ...) and per
kernel (`exec_type`), median over calls, beside each model's wall time per
call. Runtime node types are the unit compared because node names differ
between the two graphs. The per-node timers include their own overheads, so
the summed node time can exceed the wall time (it does on tiny models).

    python -m bench.studies.openvino_layers --batch 32 --seq 128 --rounds 5 --calls 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Dict, Iterable, List, Sequence, Tuple

MODELS = ("ours", "hf")
TITLES = {"ours": "our export", "hf": "Hugging Face's graph"}
RESULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results", "openvino_layers")

# One executed node of one call: (node type, kernel, real time in microseconds).
NodeTime = Tuple[str, str, float]


def executed_nodes(profiling_info: Iterable) -> List[NodeTime]:
    """The EXECUTED nodes of one call's `request.get_profiling_info()` as (type, kernel, microseconds)."""
    out = []
    for node in profiling_info:
        if str(node.status).rsplit(".", 1)[-1] != "EXECUTED":
            continue
        out.append((node.node_type, node.exec_type, node.real_time.total_seconds() * 1e6))
    return out


def per_call_sums(calls: Sequence[List[NodeTime]], key) -> Dict[str, List[float]]:
    """key(node) -> that key's summed milliseconds in each call (0.0 in a call that has none).

    >>> per_call_sums([[("MatMul", "a", 1000.0), ("MatMul", "a", 500.0)], [("Eltwise", "b", 250.0)]],
    ...               key=lambda n: n[0])
    {'MatMul': [1.5, 0.0], 'Eltwise': [0.0, 0.25]}
    """
    sums: Dict[str, List[float]] = {}
    for i, call in enumerate(calls):
        for node in call:
            sums.setdefault(key(node), [0.0] * len(calls))[i] += node[2] / 1000.0
    return sums


def node_counts(call: List[NodeTime], key) -> Dict[str, int]:
    """key(node) -> how many executed nodes one call has.

    >>> node_counts([("MatMul", "a", 1.0), ("MatMul", "b", 2.0), ("MVN", "c", 3.0)], key=lambda n: n[0])
    {'MatMul': 2, 'MVN': 1}
    """
    counts: Dict[str, int] = {}
    for node in call:
        counts[key(node)] = counts.get(key(node), 0) + 1
    return counts


def summarize(calls: Dict[str, List[List[NodeTime]]], walls: Dict[str, List[float]]) -> Dict[str, object]:
    """The medians of both models: wall ms per call, node-time ms per call, and per type and per type/kernel."""
    by_type = lambda n: n[0]  # noqa: E731
    by_kernel = lambda n: f"{n[0]} / {n[1]}"  # noqa: E731
    out: Dict[str, object] = {"wall_ms": {}, "node_ms": {}, "types": {}, "kernels": {}}
    for model in MODELS:
        out["wall_ms"][model] = statistics.median(walls[model])
        out["node_ms"][model] = statistics.median(sum(n[2] for n in call) / 1000.0 for call in calls[model])
        for name, key in (("types", by_type), ("kernels", by_kernel)):
            counts = node_counts(calls[model][0], key)
            for k, ms in per_call_sums(calls[model], key).items():
                out[name].setdefault(k, {m: {"ms": 0.0, "nodes": 0} for m in MODELS})[model] = {
                    "ms": statistics.median(ms), "nodes": counts.get(k, 0)}
    return out


def render(summary: Dict[str, object], settings: Dict[str, object], top_kernels: int = 12) -> str:
    """The study's markdown: settings, wall and node time, the node types and the kernels that differ most."""
    wall, node = summary["wall_ms"], summary["node_ms"]
    lines = [
        "# Our OpenVINO export against OpenVINO running Hugging Face's graph, per runtime node type",
        "",
        f"`{settings['command']}` ({settings['date']}, {settings['cpu']}; {settings['threads']} threads, "
        f"{settings['precision']}, batch {settings['batch']} x {settings['seq']} tokens, "
        f"{settings['rounds']} rounds x {settings['calls']} calls per model, medians over calls).",
        "",
        f"Wall time per call: {TITLES['ours']} {wall['ours']:.1f} ms, {TITLES['hf']} {wall['hf']:.1f} ms "
        f"(ours / HF {wall['ours'] / wall['hf']:.3f}). Summed node time: {node['ours']:.1f} ms against "
        f"{node['hf']:.1f} ms.",
        "",
        "| node type | ours ms (nodes) | HF ms (nodes) | ours - HF ms |",
        "|---|---:|---:|---:|",
    ]

    def rows(table, limit=None):
        items = sorted(table.items(), key=lambda kv: -abs(kv[1]["ours"]["ms"] - kv[1]["hf"]["ms"]))
        for name, v in items[:limit]:
            o, h = v["ours"], v["hf"]
            yield (f"| {name} | {o['ms']:.2f} ({o['nodes']}) | {h['ms']:.2f} ({h['nodes']}) | "
                   f"{o['ms'] - h['ms']:+.2f} |")

    lines += list(rows(summary["types"]))
    lines += ["", f"The {top_kernels} node type / kernel pairs that differ most:", "",
              "| node type / kernel | ours ms (nodes) | HF ms (nodes) | ours - HF ms |", "|---|---:|---:|---:|"]
    lines += list(rows(summary["kernels"], top_kernels))
    return "\n".join(lines) + "\n"


def _models(shape: str, cache_dir: str) -> Dict[str, str]:
    """model -> its model file (the suite's cached exports; made when missing)."""
    from bench.systems import common, hf, onnx_runtimes, ours, ours_openvino

    config = ours._config(shape)
    encoder = ours_openvino._encoder(config)
    spm = ours_openvino.padded_spm(common.spm_model(cache_dir), config.vocab_size,
                                   os.path.join(cache_dir, "openvino-ours"))
    return {"ours": ours_openvino.export(encoder, spm, text=False, cache_dir=os.path.join(cache_dir, "openvino-ours")),
            "hf": onnx_runtimes.export_onnx(hf._config(shape=shape), cache_dir=os.path.join(cache_dir, "onnx"))}


def _compiled(path: str, precision: str, hint: str):
    """One infer request of the model compiled as the suite compiles it, with PERF_COUNT."""
    import openvino as ov

    from bench.systems import threads

    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {
        "PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": "bf16" if precision == "bfloat16" else "f32",
        "PERF_COUNT": True, **threads.openvino_config()})
    return compiled.create_infer_request()


def measure(batch: int, seq: int, rounds: int, calls: int, precision: str, hint: str, shape: str,
            cache_dir: str) -> Tuple[Dict[str, List[List[NodeTime]]], Dict[str, List[float]]]:
    """Interleaved rounds of both models: every timed call's executed nodes and wall ms."""
    from bench.systems import common, onnx_runtimes

    paths = _models(shape, cache_dir)
    ex = common.synthetic_pretraining_batch(batch, seq, 1, common.shape_dims(shape)["vocab_size"])
    feeds = {"ours": {k: ex[k].astype("int32") for k in ("input_ids", "input_mask", "segment_ids")},
             "hf": onnx_runtimes._feeds(ex)}
    requests = {m: _compiled(paths[m], precision, hint) for m in MODELS}
    for m in MODELS:  # warm-up: first calls compile kernels for the shape
        for _ in range(2):
            requests[m].infer(feeds[m])
    nodes: Dict[str, List[List[NodeTime]]] = {m: [] for m in MODELS}
    walls: Dict[str, List[float]] = {m: [] for m in MODELS}
    for r in range(rounds):
        for m in (MODELS if r % 2 == 0 else MODELS[::-1]):
            for _ in range(calls):
                start = time.perf_counter()
                requests[m].infer(feeds[m])
                walls[m].append((time.perf_counter() - start) * 1000.0)
                nodes[m].append(executed_nodes(requests[m].get_profiling_info()))
    return nodes, walls


def main(argv=None) -> None:
    from bench.systems import common, threads

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=4, help="timed calls per model per round")
    p.add_argument("--precision", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--hint", default="LATENCY")
    p.add_argument("--shape", default="base", choices=("base", "tiny"))
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "albert-tf-bench"))
    p.add_argument("--output", default=None,
                   help="written as OUTPUT.md and OUTPUT.json (default bench/results/openvino_layers_<cpu-kind>)")
    args = p.parse_args(argv)
    if args.threads:
        os.environ[threads.ENV] = str(args.threads)
    args.output = args.output or f"{RESULT}_{common.cpu_kind()}"
    nodes, walls = measure(args.batch, args.seq, args.rounds, args.calls, args.precision, args.hint, args.shape,
                           args.cache_dir)
    summary = summarize(nodes, walls)
    settings = study_settings(args, "openvino_layers")
    write_result(args.output, render(summary, settings), settings, summary, walls)


def study_settings(args: argparse.Namespace, study: str) -> Dict[str, object]:
    """A node study's settings for its result: its arguments, threads, date, CPU and the command run."""
    from bench.systems import common, threads

    settings = dict(vars(args), threads=threads.count(), date=time.strftime("%Y-%m-%d"), cpu=common.cpu_line(),
                    command=(f"python -m bench.studies.{study} --batch {{batch}} --seq {{seq}} --rounds {{rounds}} "
                             "--calls {calls}").format(**vars(args)))
    settings.pop("cache_dir")
    settings.pop("output")
    return settings


def write_result(output: str, text: str, settings: Dict[str, object], summary: Dict[str, object],
                 walls: Dict[str, List[float]]) -> None:
    """Writes a node study's OUTPUT.md (its text, also printed) and OUTPUT.json."""
    with open(output + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    with open(output + ".json", "w", encoding="utf-8") as f:
        json.dump({"settings": settings, "summary": summary, "walls_ms": walls}, f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
