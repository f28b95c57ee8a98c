"""OpenVINO and ONNX Runtime as CPU-serving peers, each running Hugging Face's
AlbertModel exported to ONNX.

The model is `transformers.AlbertModel` with random weights (seed 0, the
configuration of `hf._config`), exported once per configuration with
`torch.onnx.export` (torch's default exporter, opset 17, dynamic batch and
sequence axes) and cached as a file keyed by the configuration, the torch
version and the opset. Each runtime then runs that file with its defaults:

- OpenVINO: `core.compile_model(model, "CPU", {PERFORMANCE_HINT,
  INFERENCE_PRECISION_HINT, INFERENCE_NUM_THREADS})` with bf16 or f32 inference
  precision and the measurement's threads (`threads.openvino_config`). The hint
  is LATENCY by default: the benchmark sends one synchronous batch at a time,
  and THROUGHPUT splits the cores into streams of which one request uses only
  one (see `DEFAULT_HINT`).
- ONNX Runtime: an `InferenceSession` with default options but the threads
  (`threads.session_options`) on float32, and "int8":
  `onnxruntime.quantization.quantize_dynamic` of the same file (int8 weights,
  activations quantized per call); with `fused`, on the file
  `onnxruntime.transformers`' optimizer fused (its best CPU path).
- OpenVINO with `source="torch"`: OpenVINO's own converter on the PyTorch model
  (`convert_from_torch`, as optimum-intel converts), not the ONNX file.

Raw text (`text`): Hugging Face's AlbertTokenizer in Python (`tokenizer="hf"`,
the only text path ONNX Runtime has) or, for OpenVINO, openvino-tokenizers'
conversion of the same tokenizer compiled beside the model
(`tokenizer="openvino"`: OpenVINO's own normal text path); each batch padded to
its longest row, or with `sort_rows` its rows sorted by length and run that many
at a time, as any server can (`common.length_sorted_chunks`).

Every timed function first compares the runtime's outputs with Hugging Face
torch's float32 outputs on the same inputs (`check_outputs`) and returns the
largest difference as "max_diff_vs_hf".
"""

from __future__ import annotations

import copy
import hashlib
import os
import tempfile
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from bench.systems import common, hf, threads

RUNTIMES = ("openvino", "onnxruntime")
PRECISIONS = {"openvino": ("float32", "bfloat16"), "onnxruntime": ("float32", "int8")}
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = ("last_hidden_state", "pooler_output")
# Hugging Face's class and output names for each head a study serves: the encoder (AlbertModel), or a
# sequence classifier of CLASSIFIER_LABELS labels (AlbertForSequenceClassification: logits).
HEADS = {"encoder": ("AlbertModel", OUTPUTS), "classifier": ("AlbertForSequenceClassification", ("logits",))}
CLASSIFIER_LABELS = 2
# One synchronous batch at a time: LATENCY gives that request every core;
# THROUGHPUT makes one stream per core (or pair) and a lone request uses one.
DEFAULT_HINT = "LATENCY"
# bfloat16 keeps 8 significant bits (2**-8 = 0.4% per rounding) and the
# encoder rounds at every matmul input of 12 layers. Hugging Face's own
# bfloat16 (torch.autocast) differs from its float32 by 1.3% (sequence output)
# and 2.0% (pooled output) of the output's largest magnitude on ALBERT-base
# (4 x 32 padded batch; `check_outputs` reports it as "hf_bf16_max_diff").
# A runtime is "within bf16 tolerance" at 3% of each output's scale.
BF16_RELATIVE_TOLERANCE = 3e-2

Runner = Callable[[Dict[str, np.ndarray]], Tuple[np.ndarray, np.ndarray]]


def _check_runtime(runtime: str, precision: str) -> None:
    if runtime not in PRECISIONS:
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}.")
    if precision not in PRECISIONS[runtime]:
        raise ValueError(f"{runtime} precision must be one of {PRECISIONS[runtime]}, got {precision!r}.")


def _cache_dir(cache_dir: Optional[str]) -> str:
    folder = cache_dir or os.path.join(tempfile.gettempdir(), "albert-tf-bench", "onnx")
    os.makedirs(folder, exist_ok=True)
    return folder


def _torch_model(config, head: str = "encoder"):
    import transformers

    hf._seed()
    if head == "classifier":
        config = copy.deepcopy(config)
        config.num_labels = CLASSIFIER_LABELS
    return getattr(transformers, HEADS[head][0])(config).eval()


def export_onnx(config=None, cache_dir: Optional[str] = None, head: str = "encoder") -> str:
    """The ONNX file of AlbertModel(config) (or the `head` of HEADS) with seed-0 weights (exported once, then
    cached)."""
    import torch

    config = config if config is not None else hf._config()
    head_key = "" if head == "encoder" else f" head {head}"
    key = hashlib.sha256(f"{config.to_json_string()} torch {torch.__version__} opset {OPSET}{head_key}".encode())
    path = os.path.join(_cache_dir(cache_dir), f"albert-{key.hexdigest()[:16]}.onnx")
    if os.path.exists(path):
        return path
    model = _torch_model(config, head)
    example = _feeds(common.synthetic_pretraining_batch(2, 16, 1, config.vocab_size))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    tmp = f"{path}.{os.getpid()}.tmp"
    with torch.no_grad():
        torch.onnx.export(model, tuple(torch.from_numpy(example[n]) for n in INPUTS), tmp,
                          input_names=list(INPUTS), output_names=list(HEADS[head][1]), opset_version=OPSET,
                          verbose=False,
                          dynamic_shapes={n: {0: batch, 1: seq} for n in INPUTS}, external_data=False)
    os.replace(tmp, path)
    return path


def _quantized(path: str) -> str:
    """quantize_dynamic(path) beside it (int8 weights; cached)."""
    from onnxruntime.quantization import quantize_dynamic

    out = path[:-len(".onnx")] + "-int8.onnx"
    if not os.path.exists(out):
        tmp = f"{out}.{os.getpid()}.tmp.onnx"
        quantize_dynamic(path, tmp)
        os.replace(tmp, out)
    return out


def _feeds(ex: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The TFRecord contract's names -> the ONNX model's int64 inputs."""
    return {"input_ids": ex["input_ids"].astype(np.int64), "attention_mask": ex["input_mask"].astype(np.int64),
            "token_type_ids": ex["segment_ids"].astype(np.int64)}


def openvino_precision(precision: str) -> str:
    """The inference precision OpenVINO's CPU plugin runs for `precision` here: "bf16" for "bfloat16" where the
    CPU has bfloat16 (its OPTIMIZATION_CAPABILITIES say BF16: AVX-512 BF16 or AMX), else "f32"."""
    import openvino as ov

    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return "bf16" if precision == "bfloat16" and has_bf16 else "f32"


def _openvino_runner(path: str, precision: str, hint: str,
                     output_names: Sequence[str] = OUTPUTS) -> Tuple[Runner, Dict[str, object]]:
    """run(feeds) -> the outputs named (in that order) of the model file compiled for one synchronous request."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {
        "PERFORMANCE_HINT": hint, "INFERENCE_PRECISION_HINT": "bf16" if precision == "bfloat16" else "f32",
        **threads.openvino_config()})
    request = compiled.create_infer_request()
    outputs = [compiled.output(name) for name in output_names]

    def run(feeds):
        result = request.infer(feeds)
        return tuple(result[out] for out in outputs)

    info = {"performance_hint": hint,
            "inference_precision": compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
            "streams": int(compiled.get_property("NUM_STREAMS")),
            "threads": {"openvino": int(compiled.get_property("INFERENCE_NUM_THREADS"))}}
    return run, info


def _fused(path: str, config) -> str:
    """`onnxruntime.transformers.optimizer.optimize_model` of path beside it (ONNX Runtime's transformer fusions:
    SkipLayerNormalization, FastGelu and, where its pattern matches, Attention; cached)."""
    from onnxruntime.transformers.optimizer import optimize_model

    out = path[:-len(".onnx")] + "-fused.onnx"
    if not os.path.exists(out):
        tmp = f"{out}.{os.getpid()}.tmp.onnx"
        optimize_model(path, model_type="bert", num_heads=config.num_attention_heads,
                       hidden_size=config.hidden_size).save_model_to_file(tmp)
        os.replace(tmp, out)
    return out


def fused_operators(path: str) -> Dict[str, int]:
    """{op type: count} of the fused operators ONNX Runtime's transformer optimizer put in a file."""
    import onnx

    counts: Dict[str, int] = {}
    for node in onnx.load(path, load_external_data=False).graph.node:
        if node.domain == "com.microsoft":
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def convert_from_torch(config=None, cache_dir: Optional[str] = None, head: str = "encoder") -> str:
    """OpenVINO's IR of AlbertModel(config) (or the `head` of HEADS; seed 0: the ONNX file's weights) converted
    from PyTorch by `ov.convert_model`, the path optimum-intel takes (cached beside the ONNX file)."""
    import openvino as ov
    import torch

    config = config if config is not None else hf._config()
    onnx_path = export_onnx(config, cache_dir, head)
    path = onnx_path[:-len(".onnx")] + f"-ov{ov.__version__.split('-')[0]}-from-torch.xml"
    if os.path.exists(path):
        return path
    model = _torch_model(copy.deepcopy(config), head)
    model.config.return_dict = False  # a tuple out, on a copy: the check's reference model keeps its outputs
    example = _feeds(common.synthetic_pretraining_batch(2, 16, 1, config.vocab_size))
    with torch.no_grad():
        converted = ov.convert_model(model, example_input={k: torch.from_numpy(v) for k, v in example.items()})
    for output, name in zip(converted.outputs, HEADS[head][1]):
        output.get_tensor().set_names({name})
    tmp = f"{path[:-len('.xml')]}.{os.getpid()}.tmp.xml"
    ov.save_model(converted, tmp)
    os.replace(tmp[:-len(".xml")] + ".bin", path[:-len(".xml")] + ".bin")
    os.replace(tmp, path)
    return path


def _onnxruntime_runner(path: str, precision: str, fused: bool = False,
                        config=None) -> Tuple[Runner, Dict[str, object]]:
    import onnxruntime as ort

    model_path = _fused(path, config) if fused else path
    model_path = _quantized(model_path) if precision == "int8" else model_path
    options = threads.session_options()
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])

    def run(feeds):
        sequence, pooled = session.run(list(OUTPUTS), feeds)
        return sequence, pooled

    info = {"providers": ",".join(session.get_providers()),
            "threads": {"onnxruntime_intra_op": options.intra_op_num_threads}}
    if fused:
        info["fused_operators"] = fused_operators(model_path)
    return run, info


def make_runner(runtime: str, precision: str, config=None, hint: str = DEFAULT_HINT,
                cache_dir: Optional[str] = None, fused: bool = False,
                source: str = "onnx") -> Tuple[Runner, Dict[str, object]]:
    """(run(feeds) -> (sequence_output, pooled_output), settings) for one runtime and precision.

    fused: ONNX Runtime on the file its transformer optimizer fused (`_fused`); source: for OpenVINO, "onnx"
    (the ONNX file) or "torch" (`convert_from_torch`, OpenVINO's own converter on the PyTorch model)."""
    _check_runtime(runtime, precision)
    if source not in ("onnx", "torch") or (source == "torch" and runtime != "openvino"):
        raise ValueError(f"source must be 'onnx', or 'torch' with OpenVINO; got {source!r} for {runtime!r}.")
    if fused and runtime != "onnxruntime":
        raise ValueError(f"fused=True is ONNX Runtime's transformer optimizer; got runtime {runtime!r}.")
    config = config if config is not None else hf._config()
    path = export_onnx(config, cache_dir)
    if runtime == "openvino":
        return _openvino_runner(convert_from_torch(config, cache_dir) if source == "torch" else path, precision, hint)
    return _onnxruntime_runner(path, precision, fused, config)


def _check_inputs(batch: int, seq: int, vocab: int) -> Dict[str, np.ndarray]:
    """A synthetic batch whose rows after the first are padded to shorter lengths."""
    feeds = _feeds(common.synthetic_pretraining_batch(batch, seq, 1, vocab, seed=1))
    lengths = np.linspace(seq, max(2, seq // 4), batch).astype(int)
    valid = np.arange(seq)[None, :] < lengths[:, None]
    feeds["attention_mask"] = valid.astype(np.int64)
    feeds["input_ids"] = np.where(valid, feeds["input_ids"], 0)
    feeds["token_type_ids"] = np.where(valid, feeds["token_type_ids"], 0)
    return feeds


def _torch_outputs(model, feeds, precision: str):
    import torch

    with torch.inference_mode(), hf._autocast(precision):
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return out.last_hidden_state.float().numpy(), out.pooler_output.float().numpy()


def compare_outputs(got, want, want_bf16, valid: np.ndarray, reference: str = "hf") -> Dict[str, object]:
    """A runtime's (sequence, pooled) outputs against a float32 reference's.

    want_bf16: the reference's own bfloat16 outputs (the size of bf16's
    rounding); valid: [batch, seq] bool, the real positions (the padded ones
    of the sequence output are not defined outputs). Returns per output the
    largest absolute difference, the scale (largest |value| of the
    reference) and the reference's bf16 difference; "max_diff_vs_<reference>"
    and "<reference>_bf16_max_diff" (the larger of the two outputs'), and
    "within_bf16_tolerance": every difference at most
    BF16_RELATIVE_TOLERANCE times its output's scale.
    """
    out: Dict[str, object] = {}
    within = True
    for i, name in enumerate(("sequence", "pooled")):
        pick = (lambda x: x[valid]) if name == "sequence" else (lambda x: x)
        ref = pick(want[i])
        diff = float(np.max(np.abs(pick(np.asarray(got[i], np.float32)) - ref)))
        out[f"{name}_max_diff"] = diff
        out[f"{name}_scale"] = float(np.max(np.abs(ref)))
        out[f"{name}_{reference}_bf16_max_diff"] = float(np.max(np.abs(pick(want_bf16[i]) - ref)))
        within = within and diff <= BF16_RELATIVE_TOLERANCE * out[f"{name}_scale"]
    out[f"max_diff_vs_{reference}"] = max(out["sequence_max_diff"], out["pooled_max_diff"])
    out[f"{reference}_bf16_max_diff"] = max(out[f"sequence_{reference}_bf16_max_diff"],
                                            out[f"pooled_{reference}_bf16_max_diff"])
    out["within_bf16_tolerance"] = within
    return out


def _compare(run: Runner, config, batch: int, seq: int) -> Dict[str, object]:
    feeds = _check_inputs(batch, seq, config.vocab_size)
    model = _torch_model(config)
    want = _torch_outputs(model, feeds, "float32")
    hf_bf16 = _torch_outputs(model, feeds, "bfloat16")
    return compare_outputs(run(feeds), want, hf_bf16, feeds["attention_mask"].astype(bool))


def check_outputs(runtime: str, precision: str, batch: int = 4, seq: int = 32, config=None,
                  cache_dir: Optional[str] = None) -> Dict[str, object]:
    """The runtime's outputs against Hugging Face torch's (float32) on the same padded batch.

    Returns the largest absolute difference of the sequence output (real
    positions only: padded ones are not defined outputs) and of the pooled
    output, each output's scale (largest |value| of torch's), the same
    difference for Hugging Face's own bfloat16 (torch.autocast), and
    "max_diff_vs_hf" (the larger difference), "hf_bf16_max_diff" and
    "within_bf16_tolerance": every difference at most
    BF16_RELATIVE_TOLERANCE times its output's scale.
    """
    config = config if config is not None else hf._config()
    run, _ = make_runner(runtime, precision, config, cache_dir=cache_dir)
    return _compare(run, config, batch, seq)


@threads.uses("torch")
def infer(runtime: str, precision: str, batch: int, seq: int, warmup: int, steps: int, config=None,
          hint: str = DEFAULT_HINT, cache_dir: Optional[str] = None, shape: str = "base", fused: bool = False,
          source: str = "onnx") -> Dict[str, object]:
    """Full-length encoder inference (both outputs computed, as hf.infer's forward), sequences/s
    (fused, source: `make_runner`)."""
    config = config if config is not None else hf._config(shape=shape)
    run, info = make_runner(runtime, precision, config, hint=hint, cache_dir=cache_dir, fused=fused, source=source)
    check = _compare(run, config, batch=4, seq=32)
    feeds = _feeds(common.synthetic_pretraining_batch(batch, seq, 1, config.vocab_size))
    times = common.timed_calls(lambda: run(feeds)[1], warmup, steps)
    return dict(common.per_second(batch, times), **info, **check)


def _hf_encoder(tokenizer, sentences, sort_rows: int):
    """batch -> (chunks of row indices, the model's feeds per chunk), through HF's tokenizer in Python."""
    def encode(batch):
        chunks, encodings = hf.encode_sorted(tokenizer, [sentences[i] for i in batch], sort_rows, "np")
        return chunks, [_onnx_feeds(enc) for enc in encodings]
    return encode


def _onnx_feeds(enc) -> Dict[str, np.ndarray]:
    ids = np.asarray(enc["input_ids"], np.int64)
    # One segment: all type ids 0 (transformers 5's AlbertTokenizer does not return them).
    types = enc["token_type_ids"] if "token_type_ids" in enc else np.zeros_like(ids)
    return {"input_ids": ids, "attention_mask": np.asarray(enc["attention_mask"], np.int64),
            "token_type_ids": np.asarray(types, np.int64)}


def openvino_tokenizer(tokenizer):
    """The HF tokenizer converted by openvino-tokenizers (truncation at 128, padding to the longest row),
    compiled for CPU: strings [batch] -> its outputs by name (input_ids, attention_mask, ...)."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer

    model = convert_tokenizer(tokenizer, truncation=True, max_length=common.TEXT_MAX_SEQ_LENGTH)
    compiled = ov.Core().compile_model(model, "CPU", threads.openvino_config())
    names = [out.get_any_name() for out in compiled.outputs]

    def run(texts):
        result = compiled(np.array(texts))
        return {name: result[out] for name, out in zip(names, compiled.outputs)}
    return run


def _openvino_encoder(tokenize, sentences, sort_rows: int):
    """batch -> (chunks, feeds per chunk) through the compiled openvino-tokenizers model: the batch
    tokenized once, padded to its longest row, then (with sort_rows) its rows sorted by length and each
    chunk cut to its own longest."""
    def encode(batch):
        feeds = _onnx_feeds(tokenize([sentences[i] for i in batch]))
        lengths = feeds["attention_mask"].sum(axis=1)
        if not sort_rows:
            return [np.arange(len(batch))], [feeds]
        chunks = common.length_sorted_chunks(lengths, sort_rows)
        return chunks, [{k: v[c, :int(lengths[c].max())] for k, v in feeds.items()} for c in chunks]
    return encode


def token_agreement(tokenize, tokenizer, texts) -> Dict[str, object]:
    """How openvino-tokenizers' ids compare with the HF tokenizer's on `texts`: "same_tokens" (every row's ids
    equal), "rows_differing" (their share) and "extra_tokens" (openvino-tokenizers' tokens per row minus HF's).

    For example, on ["a (b)"] a conversion that splits "▁(" as "▁", "(" gives rows_differing 1.0 and
    extra_tokens 1.0 (tests/bench/test_text_comparisons.py).
    """
    got = _onnx_feeds(tokenize(list(texts)))
    want = tokenizer(list(texts), truncation=True, max_length=common.TEXT_MAX_SEQ_LENGTH)["input_ids"]
    rows = [list(ids[:int(n)]) for ids, n in zip(got["input_ids"], got["attention_mask"].sum(axis=1))]
    differing = sum(a != list(b) for a, b in zip(rows, want))
    return {"same_tokens": differing == 0, "rows_differing": differing / len(rows),
            "extra_tokens": float(np.mean([len(a) - len(b) for a, b in zip(rows, want)]))}


@threads.uses("torch")
def text(runtime: str, precision: str, spm_path: str, pool_file: str, feed: str, warmup: int, steps: int,
         hint: str = DEFAULT_HINT, tokenizer: str = "hf", sort_rows: int = 0, config=None,
         cache_dir: Optional[str] = None, shape: str = "base", fused: bool = False) -> Dict[str, object]:
    """Raw text through AlbertModel exported to ONNX and run by OpenVINO or ONNX Runtime
    (`make_runner`), over the pool's batches, tokenizing inside the timed call.

    tokenizer: "hf" (AlbertTokenizer in Python) or "openvino" (openvino-tokenizers,
    OpenVINO only; the result says how its ids compare with HF's on the first timed batch,
    `token_agreement`); sort_rows: 0 pads each batch to its longest row, N sorts its rows by
    length and runs N at a time. config: default ALBERT-`shape` with the tokenizer's
    vocabulary; cache_dir: where the ONNX export is kept; fused: `make_runner`.
    """
    if tokenizer not in ("hf", "openvino") or (tokenizer == "openvino" and runtime != "openvino"):
        raise ValueError(f"tokenizer must be 'hf', or 'openvino' with OpenVINO; got {tokenizer!r} for {runtime!r}.")
    hf_tokenizer = hf._tokenizer(spm_path)
    config = config if config is not None else hf._config(vocab_size=len(hf_tokenizer), shape=shape)
    run, info = make_runner(runtime, precision, config, hint=hint, cache_dir=cache_dir, fused=fused)
    sentences, warm, timed = common.read_text_pool(pool_file, feed, warmup, steps)
    if tokenizer == "openvino":
        tokenize = openvino_tokenizer(hf_tokenizer)
        info.update(token_agreement(tokenize, hf_tokenizer, [sentences[i] for i in timed[0]]))
        encode = _openvino_encoder(tokenize, sentences, sort_rows)
    else:
        encode = _hf_encoder(hf_tokenizer, sentences, sort_rows)

    def serve(batch):
        chunks, feeds = encode(batch)
        return common.in_input_order(chunks, [run(f)[1] for f in feeds])

    times = common.timed_pass(serve, warm, timed)
    masks = [f["attention_mask"] for b in timed for f in encode(b)[1]]
    return dict(common.text_pass_result(times, masks), **info)
