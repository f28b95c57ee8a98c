r"""int8 serving on this CPU: our int8 OpenVINO export against our float one and against the int8 peers.

Study (2026-12-06, issue 33 item 2). Question: how fast is `albert-export --format=openvino --quantize=int8`
against our float export, against NNCF quantizing OpenVINO's conversion of Hugging Face's graph (the way
optimum-intel quantizes: the same NNCF call, transformer settings, the same calibration texts) and against
ONNX Runtime's dynamic int8 (`quantize_dynamic`)? Answer: on the AVX2 kind (AMD EPYC Zen 3, no VNNI, 3 rounds),
int8 gains nothing for any system there (int8 MatMuls run at about float32's rate without VNNI): ours int8 level
with our float export (0.92x, rounds 0.78-1.06x) and with NNCF on Hugging Face's graphs, behind ONNX Runtime's
dynamic int8 (0.93x, 0.86-0.99x); our float export level with OpenVINO on Hugging Face's graphs
(bench/results/int8-avx2.md). The kinds with VNNI or AMX, where int8 is expected to pay, are not measured yet.
Command: `python -m bench.studies.int8_serving --rounds 3`.

The model is ALBERT-base's shape (albert_base_v2) with random weights, ours from `AlbertEncoder` (seed 0),
Hugging Face's from `transformers.AlbertModel` (seed 0) exported to ONNX by bench/systems/onnx_runtimes.py.
Calibration: the same 300 real sentences (standard-library docstrings, 5-60 words) for both NNCF calls,
tokenized by our preprocessor (the bench's SentencePiece model, padded to 30,000 pieces). Work: full-length
batches of random ids (batch 32, seq 128: throughput; batch 1, seq 128: latency percentiles), the ids graphs
only (the tokenizer's cost is the same for every row). Every system is compiled for one synchronous request
with the thread count of bench/systems/threads.py, f32 inference precision (int8 rows: int8 MatMuls, the rest
f32). Rounds are interleaved (every system once, then again); each round's ratios are paired, and each ratio is
given as the median over rounds with its range: a range that crosses 1.0 is "level".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.systems import common, threads  # noqa: E402

CALIBRATION_SIZE = 300
# (numerator, denominator) of the paired ratios the study reports.
RATIOS = [("ours int8", "ours float"), ("ours int8", "HF model, OpenVINO from torch, NNCF int8"),
          ("ours int8", "HF graph, NNCF int8 (OpenVINO)"), ("ours int8", "HF graph, ONNX Runtime dynamic int8"),
          ("ours float", "HF model, OpenVINO from torch, float"), ("ours float", "HF graph, OpenVINO float"),
          ("ours float", "HF graph, ONNX Runtime float")]


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile.

    >>> _percentile([1.0, 2.0, 3.0, 4.0], 50), _percentile([1.0, 2.0, 3.0, 4.0], 99)
    (2.0, 4.0)
    """
    ordered = sorted(values)
    return ordered[max(0, int(np.ceil(q / 100.0 * len(ordered))) - 1)]


def _openvino(model_or_path) -> Callable:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(model_or_path, "CPU", {"PERFORMANCE_HINT": "LATENCY",
                                                          "INFERENCE_PRECISION_HINT": "f32",
                                                          **threads.openvino_config()})
    request = compiled.create_infer_request()
    return lambda feeds: request.infer(feeds)


def _onnxruntime(path: str) -> Callable:
    import onnxruntime as ort

    session = ort.InferenceSession(path, threads.session_options(), providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def _hf_feeds(ids: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    return {"input_ids": ids["input_ids"].astype(np.int64), "attention_mask": ids["input_mask"].astype(np.int64),
            "token_type_ids": ids["segment_ids"].astype(np.int64)}


def build_systems(cache_dir: str, shape: str = "base") -> Dict[str, tuple]:
    """name -> (run(ids) callable, feeds converter): every system of the study, exported and quantized here
    (`shape`: "base", or "tiny" for a smoke run)."""
    import nncf
    import openvino as ov

    import albert_tf
    from albert_tf.export import int8
    from albert_tf.export.openvino import export_openvino
    from bench.systems import hf, onnx_runtimes, ours_openvino

    spm = ours_openvino.padded_spm(common.spm_model(cache_dir), common.ALBERT_BASE["vocab_size"], cache_dir)
    config = albert_tf.AlbertConfig(**common.shape_dims(shape))  # "gelu" is the tanh form, HF's gelu_new
    encoder = ours_openvino._encoder(config)
    texts = int8.TextSet(common.mixed_length_sentences(CALIBRATION_SIZE, seed=0), source="docstring sentences")
    work = tempfile.mkdtemp(prefix="int8-study-", dir=cache_dir)
    started = time.perf_counter()
    float_dir = export_openvino(encoder, os.path.join(work, "float"), spm_model_file=spm, text_signatures=False,
                                max_seq_length=128)
    int8_dir = export_openvino(encoder, os.path.join(work, "int8"), spm_model_file=spm, text_signatures=False,
                               max_seq_length=128, quantize="int8", calibration=texts)
    print(f"our exports (float, int8): {time.perf_counter() - started:.0f} s", flush=True)
    onnx_path = onnx_runtimes.export_onnx(hf._config(shape=shape), cache_dir)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=128)
    items = [_hf_feeds(item) for item in int8.ids_items(pre, texts)]
    started = time.perf_counter()
    quantize = lambda model: nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,  # noqa
                                           subset_size=len(items))
    hf_int8 = quantize(ov.convert_model(onnx_path))
    # OpenVINO's own converter on the PyTorch model (optimum-intel's path), not through ONNX.
    hf_direct = ov.Core().read_model(onnx_runtimes.convert_from_torch(hf._config(shape=shape), cache_dir))
    hf_direct_int8 = quantize(hf_direct.clone())
    print(f"NNCF on Hugging Face's graphs: {time.perf_counter() - started:.0f} s", flush=True)
    ours = lambda ids: {k: v.astype(np.int32) for k, v in ids.items()}  # noqa: E731
    return {
        "HF model, OpenVINO from torch, float": (_openvino(hf_direct), _hf_feeds),
        "HF model, OpenVINO from torch, NNCF int8": (_openvino(hf_direct_int8), _hf_feeds),
        "ours float": (_openvino(os.path.join(float_dir, "model.xml")), ours),
        "ours int8": (_openvino(os.path.join(int8_dir, "model.xml")), ours),
        "HF graph, OpenVINO float": (_openvino(onnx_path), _hf_feeds),
        "HF graph, NNCF int8 (OpenVINO)": (_openvino(hf_int8), _hf_feeds),
        "HF graph, ONNX Runtime float": (_onnxruntime(onnx_path), _hf_feeds),
        "HF graph, ONNX Runtime dynamic int8": (_onnxruntime(onnx_runtimes._quantized(onnx_path)), _hf_feeds),
    }


def measure(systems: Dict[str, tuple], rounds: int, batch: int, steps: int, latency_calls: int,
            seed: int) -> Dict[str, Dict[str, List[float]]]:
    """name -> {"seq_per_s": one figure a round, "latency_ms": every batch-1 call's}: interleaved rounds."""
    ex = common.synthetic_pretraining_batch(batch, 128, 1, 30000, seed=seed)
    big = {k: ex[k] for k in ("input_ids", "input_mask", "segment_ids")}
    one = {k: v[:1] for k, v in big.items()}
    out = {name: {"seq_per_s": [], "latency_ms": []} for name in systems}
    for r in range(rounds):
        for name, (run, convert) in systems.items():
            feeds, single = convert(big), convert(one)
            times = common.timed_calls(lambda: run(feeds), warmup=1, steps=steps)
            out[name]["seq_per_s"].append(batch / statistics.median(times))
            lat = common.timed_calls(lambda: run(single), warmup=2, steps=latency_calls)
            out[name]["latency_ms"].extend(1000.0 * t for t in lat)
            print(f"round {r + 1}/{rounds} {name}: {out[name]['seq_per_s'][-1]:.2f} seq/s, batch-1 p50 "
                  f"{_percentile(lat, 50) * 1000:.1f} ms", flush=True)
    return out


def report(results: Dict[str, Dict[str, List[float]]], header: str, shape: str = "base") -> str:
    """The markdown table of rates and latencies, then the paired ratios (median [range] over rounds)."""
    lines = [header, "", f"| system (ALBERT {shape} shape, seq 128, f32 inference) | batch 32 seq/s, median [range] | "
             "batch 1 p50 / p90 / p99 ms |", "|---|---|---|"]
    for name, r in results.items():
        rates, lat = r["seq_per_s"], r["latency_ms"]
        lines.append(f"| {name} | {statistics.median(rates):.2f} [{min(rates):.2f}, {max(rates):.2f}] | "
                     f"{_percentile(lat, 50):.1f} / {_percentile(lat, 90):.1f} / {_percentile(lat, 99):.1f} |")
    lines += ["", "| ratio (batch 32 throughput, paired per round) | median [range] | verdict |", "|---|---|---|"]
    for a, b in RATIOS:
        ratios = [x / y for x, y in zip(results[a]["seq_per_s"], results[b]["seq_per_s"])]
        low, high = min(ratios), max(ratios)
        verdict = "level" if low <= 1.0 <= high else ("ahead" if low > 1.0 else "behind")
        lines.append(f"| {a} / {b} | {statistics.median(ratios):.2f}x [{low:.2f}, {high:.2f}] | {verdict} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed batch-32 calls a round")
    parser.add_argument("--latency_calls", type=int, default=20, help="timed batch-1 calls a round")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random ids")
    parser.add_argument("--shape", choices=("base", "tiny"), default="base", help="tiny: a smoke run")
    parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "albert-tf-bench"))
    parser.add_argument("--out", default=None, help="default: bench/results/int8-<cpu kind>.md and .json")
    args = parser.parse_args(argv)
    cpu = common.cpu_description()
    kind = common.cpu_kind(cpu)
    systems = build_systems(args.cache_dir, args.shape)
    results = measure(systems, args.rounds, 32, args.steps, args.latency_calls, args.seed)
    command = f"python -m bench.studies.int8_serving --rounds {args.rounds} --steps {args.steps} --shape {args.shape}"
    header = (f"# int8 serving on {common.cpu_line(cpu)} ({kind}), {threads.count()} threads\n\n"
              f"Command: `{command}` ({time.strftime('%Y-%m-%d')}); bench/studies/int8_serving.py says what runs.")
    text = report(results, header, args.shape)
    print(text)
    out = args.out or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results",
                                   f"int8-{kind}")
    with open(out + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    with open(out + ".json", "w", encoding="utf-8") as f:
        json.dump({"command": command, "cpu": cpu, "cpu_kind": kind, "threads": threads.count(),
                   "results": results}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
