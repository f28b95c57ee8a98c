r"""int8 serving on this CPU: our int8 OpenVINO export against our float one and against the int8 peers.

Study (2026-12-06, issue 33 item 2). Question: how fast is `albert-export --format=openvino --quantize=int8`
against our float export, against NNCF quantizing OpenVINO's conversion of Hugging Face's graph (the way
optimum-intel quantizes: the same NNCF call, transformer settings, the same calibration texts) and against
ONNX Runtime's dynamic int8 (`quantize_dynamic`)? Answer: on the AVX2 kind (AMD EPYC Zen 3, no VNNI, 3 rounds),
int8 gains nothing for any system there (int8 MatMuls run at about float32's rate without VNNI): ours int8 level
with our float export (0.92x, rounds 0.78-1.06x) and with NNCF on Hugging Face's graphs, behind ONNX Runtime's
dynamic int8 (0.93x, 0.86-0.99x); our float export level with OpenVINO on Hugging Face's graphs
(bench/results/int8-avx2.md). On AVX-512 with VNNI and bfloat16 (AMD EPYC Zen 4, two runs of 4 rounds, float
parts in bfloat16; bench/results/int8-avx512-bf16.md, -2.md): ours int8 ahead of our float export, 1.65x and
1.88x on full-length batches (rounds 1.59-2.03x), 1.71x and 1.79x on real text; on full-length batches level
with NNCF's int8 of Hugging Face's model from torch (0.95x, 1.01x; rounds 0.92-1.09x) and of its ONNX graph
(1.00x, 1.06x): the node profile (`--profile_calls 3`, at the end of run 1) puts both graphs at the same cost,
dense layers included; on a batch of real sentences padded to its longest, ours (dense layers on the real tokens
only) 1.55x and 1.79x the peer from torch (rounds 1.39-1.87x); 3.8-4.4x ONNX Runtime's dynamic int8. Before
int8 exports kept their tokens rank-3, ours ran NNCF's quantizers as stand-alone float32 FakeQuantize nodes on
2-D activations (int8-avx512-bf16-profile.md: 50 of 1118 ms a call). On Intel with AMX (2026-12-07, two runs,
int8-amx.md with the profile, int8-amx-2.md): ours int8 ahead of our float export by 1.37x and 1.46x (AMX's
bfloat16 kernels already run the float dense layers fast: 365 of 550 ms a call, int8's 236; the other nodes
184 -> 157 ms), level with NNCF's int8 from torch (0.96x, 0.98x), ahead of it on real text (1.41x, 1.45x).
Command: `python -m bench.studies.int8_serving --rounds 4 --steps 3`.
Serving a two-label classifier instead (`--model classifier`, 2026-12-07, two runs on the avx512-bf16 kind;
int8-avx512-bf16-classifier.md with the profile, -classifier-2.md), whose last block our model computes at [CLS]
only while the peers' graphs compute it at every position: ours int8 level with NNCF's int8 from torch (1.05x,
1.07x; rounds 0.96-1.13x; node sums 1091 vs 1152 ms a call) and ahead of it from ONNX (1.11x, 1.09x); ours
float ahead of OpenVINO's float from torch (1.11x, 1.06x) and from ONNX (1.08x, 1.10x).

The model is ALBERT-base's shape (albert_base_v2) with random weights, ours from `AlbertEncoder` (seed 0),
Hugging Face's from `transformers.AlbertModel` (seed 0) exported to ONNX by bench/systems/onnx_runtimes.py; with
`--model classifier`, `AlbertClassifier` and `AlbertForSequenceClassification` of two labels (seed 0).
Calibration: the same 300 real sentences (standard-library docstrings, 5-60 words) for both NNCF calls,
tokenized by our preprocessor (the bench's SentencePiece model, padded to 30,000 pieces). Work: full-length
batches of random ids (batch 32, seq 128: throughput; batch 1, seq 128: latency percentiles) and a batch of 32
other real sentences padded to its longest (`text_batch`: where our export's token packing skips the padding and
the peers compute it), the ids graphs only (the tokenizer's cost is the same for every row). Every system is compiled for one synchronous request
with the thread count of bench/systems/threads.py. The OpenVINO rows run their float parts (the whole float
graphs; in the int8 graphs what NNCF leaves in float) in the kind's precision (`--precision=auto`: bfloat16 on
the amx and avx512-bf16 kinds, as OpenVINO and bench.run serve there, float32 elsewhere); ONNX Runtime runs
float32. The report ends with the kernels that ran each OpenVINO row's dense layers (`dense_kernels`). Rounds
are interleaved (every system once, then again); each round's ratios are paired, and each ratio is given as the
median over rounds with its range: a range that crosses 1.0 is "level".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import plan  # noqa: E402
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


def openvino_precision_hint(precision: str) -> str:
    """OpenVINO's INFERENCE_PRECISION_HINT for a bench precision: the float parts of every OpenVINO row (the
    whole float graphs; in the int8 graphs, what NNCF leaves in float) run in it.

    >>> openvino_precision_hint("bfloat16"), openvino_precision_hint("float32")
    ('bf16', 'f32')
    """
    return {"bfloat16": "bf16", "float32": "f32"}[precision]


def dense_kernels(compiled) -> Dict[str, int]:
    """"kernel precision" -> count over the FullyConnected / MatMul nodes of a compiled OpenVINO model's runtime
    graph, read after a call (kernels with dynamic shapes are chosen then): which kernel (e.g.
    brgemm_avx512_bf16, brgemm_avx512_I8) runs the dense layers, in which precision. It says whether the int8
    MatMuls reached integer kernels."""
    counts: Dict[str, int] = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        text = {key: info[key].astype(str) for key in ("layerType", "primitiveType", "runtimePrecision") if key in info}
        if text.get("layerType") not in ("FullyConnected", "MatMul"):
            continue
        key = f"{text['layerType']}: {text.get('primitiveType', '?')} {text.get('runtimePrecision', '?')}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def _openvino(model_or_path, precision: str, compiled_models: Dict[str, object], name: str) -> Callable:
    import openvino as ov

    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": openvino_precision_hint(precision),
              **threads.openvino_config()}
    compiled = core.compile_model(model_or_path, "CPU", config)
    compiled_models[name] = (compiled, model_or_path)
    request = compiled.create_infer_request()
    return lambda feeds: request.infer(feeds)


def _onnxruntime(path: str) -> Callable:
    import onnxruntime as ort

    session = ort.InferenceSession(path, threads.session_options(), providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def _hf_feeds(ids: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    return {"input_ids": ids["input_ids"].astype(np.int64), "attention_mask": ids["input_mask"].astype(np.int64),
            "token_type_ids": ids["segment_ids"].astype(np.int64)}


def our_model(config, model: str):
    """Ours with seed-0 weights: `AlbertEncoder` ("encoder") or a two-label `AlbertClassifier` ("classifier")."""
    import keras

    import albert_tf
    from bench.systems import onnx_runtimes, ours_openvino

    if model == "encoder":
        return ours_openvino._encoder(config)
    keras.utils.set_random_seed(0)
    return albert_tf.AlbertClassifier(config, onnx_runtimes.CLASSIFIER_LABELS)


def build_systems(cache_dir: str, shape: str, precision: str, compiled_models: Dict[str, object],
                  model: str = "encoder") -> Dict[str, tuple]:
    """name -> (run(ids) callable, feeds converter): every system of the study, exported and quantized here
    (`shape`: "base", or "tiny" for a smoke run; `model`: a key of `onnx_runtimes.HEADS`, the same head on
    every side). The OpenVINO rows run their float parts in `precision`;
    `compiled_models` gets each OpenVINO row's (compiled model, its source): the kernels are chosen at the first
    call, and `node_profile` compiles the source again with PERF_COUNT."""
    import nncf
    import openvino as ov

    import albert_tf
    from albert_tf.export import int8
    from albert_tf.export.openvino import export_openvino
    from bench.systems import hf, onnx_runtimes, ours_openvino

    spm = ours_openvino.padded_spm(common.spm_model(cache_dir), common.ALBERT_BASE["vocab_size"], cache_dir)
    config = albert_tf.AlbertConfig(**common.shape_dims(shape))  # "gelu" is the tanh form, HF's gelu_new
    ours_model = our_model(config, model)
    texts = int8.TextSet(common.mixed_length_sentences(CALIBRATION_SIZE, seed=0), source="docstring sentences")
    work = tempfile.mkdtemp(prefix="int8-study-", dir=cache_dir)
    started = time.perf_counter()
    float_dir = export_openvino(ours_model, os.path.join(work, "float"), spm_model_file=spm, text_signatures=False,
                                max_seq_length=128)
    int8_dir = export_openvino(ours_model, os.path.join(work, "int8"), spm_model_file=spm, text_signatures=False,
                               max_seq_length=128, quantize="int8", calibration=texts)
    print(f"our exports (float, int8): {time.perf_counter() - started:.0f} s", flush=True)
    onnx_path = onnx_runtimes.export_onnx(hf._config(shape=shape), cache_dir, model)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=128)
    items = [_hf_feeds(item) for item in int8.ids_items(pre, texts)]
    started = time.perf_counter()
    quantize = lambda model: nncf.quantize(model, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,  # noqa
                                           subset_size=len(items))
    hf_int8 = quantize(ov.convert_model(onnx_path))
    # OpenVINO's own converter on the PyTorch model (optimum-intel's path), not through ONNX.
    hf_direct = ov.Core().read_model(onnx_runtimes.convert_from_torch(hf._config(shape=shape), cache_dir, model))
    hf_direct_int8 = quantize(hf_direct.clone())
    print(f"NNCF on Hugging Face's graphs: {time.perf_counter() - started:.0f} s", flush=True)
    ours = lambda ids: {k: v.astype(np.int32) for k, v in ids.items()}  # noqa: E731
    openvino_rows = {"HF model, OpenVINO from torch, float": hf_direct,
                     "HF model, OpenVINO from torch, NNCF int8": hf_direct_int8,
                     "ours float": os.path.join(float_dir, "model.xml"),
                     "ours int8": os.path.join(int8_dir, "model.xml"),
                     "HF graph, OpenVINO float": onnx_path, "HF graph, NNCF int8 (OpenVINO)": hf_int8}
    run = {name: _openvino(model, precision, compiled_models, name) for name, model in openvino_rows.items()}
    return {
        **{name: (run[name], ours if name.startswith("ours") else _hf_feeds) for name in openvino_rows},
        "HF graph, ONNX Runtime float": (_onnxruntime(onnx_path), _hf_feeds),
        "HF graph, ONNX Runtime dynamic int8": (_onnxruntime(onnx_runtimes._quantized(onnx_path)), _hf_feeds),
    }


def text_batch(cache_dir: str, batch: int, seed: int) -> Dict[str, np.ndarray]:
    """A batch of `batch` real sentences (5-60 words), tokenized by our preprocessor and padded to its longest
    row, as a server pads a request's texts (Hugging Face's tokenizer with padding=True gives the same)."""
    import albert_tf
    from albert_tf.export import int8
    from bench.systems import ours_openvino

    spm = ours_openvino.padded_spm(common.spm_model(cache_dir), common.ALBERT_BASE["vocab_size"], cache_dir)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=128)
    texts = int8.TextSet(common.mixed_length_sentences(batch, seed=seed + 1), source="docstring sentences")
    return int8.ids_items(pre, texts, batch_size=batch)[0]


def measure(systems: Dict[str, tuple], rounds: int, batch: int, steps: int, latency_calls: int,
            seed: int, text_ids: Dict[str, np.ndarray]) -> Dict[str, Dict[str, List[float]]]:
    """name -> {"seq_per_s": one figure a round (full-length batches), "text_seq_per_s": one a round (the real-text
    batch `text_ids`), "latency_ms": every batch-1 call's}: interleaved rounds."""
    ex = common.synthetic_pretraining_batch(batch, 128, 1, 30000, seed=seed)
    big = {k: ex[k] for k in ("input_ids", "input_mask", "segment_ids")}
    one = {k: v[:1] for k, v in big.items()}
    out = {name: {"seq_per_s": [], "text_seq_per_s": [], "latency_ms": []} for name in systems}
    for r in range(rounds):
        for name, (run, convert) in systems.items():
            feeds, single, text = convert(big), convert(one), convert(text_ids)
            times = common.timed_calls(lambda: run(feeds), warmup=1, steps=steps)
            out[name]["seq_per_s"].append(batch / statistics.median(times))
            times = common.timed_calls(lambda: run(text), warmup=1, steps=steps)
            out[name]["text_seq_per_s"].append(len(text_ids["input_ids"]) / statistics.median(times))
            lat = common.timed_calls(lambda: run(single), warmup=2, steps=latency_calls)
            out[name]["latency_ms"].extend(1000.0 * t for t in lat)
            print(f"round {r + 1}/{rounds} {name}: {out[name]['seq_per_s'][-1]:.2f} seq/s, real text "
                  f"{out[name]['text_seq_per_s'][-1]:.2f} seq/s, batch-1 p50 {_percentile(lat, 50) * 1000:.1f} ms",
                  flush=True)
    return out


# The rows `node_profile` times node by node: ours int8, the int8 peers on OpenVINO, our float export and the
# float peer it is compared with.
PROFILED = ("ours int8", "HF model, OpenVINO from torch, NNCF int8", "HF graph, NNCF int8 (OpenVINO)", "ours float",
            "HF model, OpenVINO from torch, float")


def node_profile(systems: Dict[str, tuple], compiled_models: Dict[str, tuple], precision: str, batch: int,
                 calls: int, seed: int) -> Dict[str, Dict[str, float]]:
    """name -> {"node type (kernel)": median ms a call} over `calls` batch-`batch` calls with OpenVINO's
    PERF_COUNT (a separate compilation of the same graph, so the timed rows carry no profiling cost)."""
    import openvino as ov

    from bench.studies import openvino_layers

    ex = common.synthetic_pretraining_batch(batch, 128, 1, 30000, seed=seed)
    ids = {k: ex[k] for k in ("input_ids", "input_mask", "segment_ids")}
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": openvino_precision_hint(precision),
              "PERF_COUNT": True, **threads.openvino_config()}
    out = {}
    for name in PROFILED:
        request = ov.Core().compile_model(compiled_models[name][1], "CPU", config).create_infer_request()
        feeds = systems[name][1](ids)
        request.infer(feeds)  # the first call chooses the kernels
        per_call = []
        for _ in range(calls):
            request.infer(feeds)
            per_call.append(openvino_layers.executed_nodes(request.get_profiling_info()))
        sums = openvino_layers.per_call_sums(per_call, key=lambda node: f"{node[0]} ({node[1]})")
        out[name] = {kind: statistics.median(ms) for kind, ms in sums.items()}
    return out


def render_profile(profile: Dict[str, Dict[str, float]], batch: int, share: float = 0.01) -> str:
    """The node kinds that take at least `share` of some row's total, ms a call per row, then the totals.

    >>> print(render_profile({"a": {"FC (x)": 9.0, "FQ (y)": 1.0}, "b": {"FC (x)": 10.0}}, 32))  # doctest: +ELLIPSIS
    | node type (kernel), ms per batch-32 call | a | b |
    |---|---|---|
    | FC (x) | 9.0 | 10.0 |
    | FQ (y) | 1.0 | - |
    | all executed nodes | 10.0 | 10.0 |
    """
    names = list(profile)
    totals = {n: sum(profile[n].values()) for n in names}
    kinds = {k for n in names for k, ms in profile[n].items() if ms >= share * totals[n]}
    first = names[0]
    lines = [f"| node type (kernel), ms per batch-{batch} call | " + " | ".join(names) + " |",
             "|" + "---|" * (len(names) + 1)]
    for kind in sorted(kinds, key=lambda k: -profile[first].get(k, 0.0)):
        lines.append(f"| {kind} | " + " | ".join(f"{profile[n][kind]:.1f}" if kind in profile[n] else "-"
                                                 for n in names) + " |")
    lines.append("| all executed nodes | " + " | ".join(f"{totals[n]:.1f}" for n in names) + " |")
    return "\n".join(lines)


def report(results: Dict[str, Dict[str, List[float]]], header: str, shape: str = "base",
           precision: str = "float32", kernels: Optional[Dict[str, Dict[str, int]]] = None,
           text_shape: str = "", model: str = "encoder") -> str:
    """The markdown table of rates and latencies, the paired ratios (median [range] over rounds) of each
    workload, then the kernels that ran each OpenVINO row's dense layers."""
    float_parts = "f32" if precision == "float32" else f"OpenVINO rows' float parts in {precision}, ONNX Runtime f32"
    texts = all(r.get("text_seq_per_s") for r in results.values())
    text_column = f" real text {text_shape} seq/s |" if texts else ""
    what = "" if model == "encoder" else f" {model}"
    lines = [header, "", f"| system (ALBERT {shape} shape{what}, {float_parts}) | batch 32 x 128 seq/s, median [range] |"
             f"{text_column} batch 1 x 128 p50 / p90 / p99 ms |", "|---|---|---|" + ("---|" if texts else "")]
    for name, r in results.items():
        rates, lat = r["seq_per_s"], r["latency_ms"]
        text = f" {_median_range(r['text_seq_per_s'])} |" if texts else ""
        lines.append(f"| {name} | {_median_range(rates)} |{text} "
                     f"{_percentile(lat, 50):.1f} / {_percentile(lat, 90):.1f} / {_percentile(lat, 99):.1f} |")
    for metric, what in (("seq_per_s", "batch 32 x 128"), ("text_seq_per_s", f"real text {text_shape}")):
        if metric == "text_seq_per_s" and not texts:
            continue
        lines += ["", f"| ratio ({what} throughput, paired per round) | median [range] | verdict |", "|---|---|---|"]
        for a, b in RATIOS:
            ratios = [x / y for x, y in zip(results[a][metric], results[b][metric])]
            low, high = min(ratios), max(ratios)
            verdict = "level" if low <= 1.0 <= high else ("ahead" if low > 1.0 else "behind")
            lines.append(f"| {a} / {b} | {statistics.median(ratios):.2f}x [{low:.2f}, {high:.2f}] | {verdict} |")
    if kernels:
        lines += ["", "| OpenVINO row | dense-layer nodes of the compiled graph: kernel, precision (count) |",
                  "|---|---|"]
        for name, counts in kernels.items():
            lines.append(f"| {name} | " + "; ".join(f"{k} ({n})" for k, n in sorted(counts.items())) + " |")
    return "\n".join(lines) + "\n"


def _median_range(rates: Sequence[float]) -> str:
    """
    >>> _median_range([2.0, 1.0, 4.0])
    '2.00 [1.00, 4.00]'
    """
    return f"{statistics.median(rates):.2f} [{min(rates):.2f}, {max(rates):.2f}]"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="timed batch-32 calls a round")
    parser.add_argument("--latency_calls", type=int, default=20, help="timed batch-1 calls a round")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random ids")
    parser.add_argument("--profile_calls", type=int, default=3,
                        help="batch-32 calls profiled node by node (PERF_COUNT) per PROFILED row; 0: none")
    parser.add_argument("--precision", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="the OpenVINO rows' float parts; auto: the CPU kind's (bench.plan.kind_precision)")
    parser.add_argument("--shape", choices=("base", "tiny"), default="base", help="tiny: a smoke run")
    parser.add_argument("--model", choices=("encoder", "classifier"), default="encoder",
                        help="what every system serves: the encoder (pooled and sequence outputs) or a two-label "
                             "sequence classifier (logits)")
    parser.add_argument("--cache_dir", default=os.path.join(tempfile.gettempdir(), "albert-tf-bench"))
    parser.add_argument("--out", default=None, help="default: bench/results/int8-<cpu kind>.md and .json")
    args = parser.parse_args(argv)
    cpu = common.cpu_description()
    kind = common.cpu_kind(cpu)
    precision = plan.kind_precision(kind) if args.precision == "auto" else args.precision
    compiled_models: Dict[str, tuple] = {}
    systems = build_systems(args.cache_dir, args.shape, precision, compiled_models, args.model)
    record: Dict[str, object] = {}
    sections = []
    if args.rounds > 0:
        text_ids = text_batch(args.cache_dir, 32, args.seed)
        real = text_ids["input_mask"].sum(axis=1)
        record["text_batch"] = {"rows": len(real), "padded_length": int(text_ids["input_ids"].shape[1]),
                                "real_tokens": int(real.sum()), "shortest": int(real.min()), "longest": int(real.max())}
        text_shape = f"batch 32 x {record['text_batch']['padded_length']}"
        record["results"] = measure(systems, args.rounds, 32, args.steps, args.latency_calls, args.seed, text_ids)
        record["dense_kernels"] = {name: dense_kernels(c) for name, (c, _) in compiled_models.items()}
        sections.append(report(record["results"], "", args.shape, precision, record["dense_kernels"],
                               text_shape, args.model).strip())
        batch_info = record["text_batch"]
        sections.append(f"Real text: {batch_info['rows']} docstring sentences of {batch_info['shortest']}-"
                        f"{batch_info['longest']} tokens ({batch_info['real_tokens']} real of "
                        f"{batch_info['rows'] * batch_info['padded_length']} positions), padded to the longest; "
                        "every system gets the same arrays.")
    if args.profile_calls > 0:
        record["profile"] = node_profile(systems, compiled_models, precision, 32, args.profile_calls, args.seed)
        sections.append("Node by node (OpenVINO's PERF_COUNT, median of the profiled calls, every executed node "
                        "summed by type and kernel; rows under 1% of every total left out):\n\n"
                        + render_profile(record["profile"], 32))
    command = (f"python -m bench.studies.int8_serving --rounds {args.rounds} --steps {args.steps} --shape {args.shape}"
               f" --precision {args.precision} --profile_calls {args.profile_calls} --model {args.model}")
    header = (f"# int8 serving on {common.cpu_line(cpu)} ({kind}), {threads.count()} threads\n\n"
              f"Command: `{command}` ({time.strftime('%Y-%m-%d')}); bench/studies/int8_serving.py says what runs.")
    text = "\n\n".join([header] + sections) + "\n"
    print(text)
    suffix = ("" if precision == plan.kind_precision(kind) else f"-{precision}") + (
        "" if args.model == "encoder" else f"-{args.model}")
    out = args.out or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results",
                                   f"int8-{kind}{suffix}")
    with open(out + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    with open(out + ".json", "w", encoding="utf-8") as f:
        json.dump({"command": command, "cpu": cpu, "cpu_kind": kind, "threads": threads.count(),
                   "precision": precision, "model": args.model, **record}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
