"""What `python -m bench.run` measures: the measurements of each plan, the table each belongs to, and the
pairs of rows whose ratios a run reports.

Plans (`plan`):

- "default": what the claims rest on, sized so that 5 repetitions fit in about 70 minutes on a 2-core
  AVX-512 BF16 CPU (`bench.estimate`, from the wall times of earlier runs). In the precision "auto" picks
  on the CPU's kind (`kind_precision`: bfloat16 on amx and avx512-bf16, float32 on avx2), ALBERT-base:
  training at batch 8 x 128, full-length inference at batch 32 against the serving peers at their best
  (torch.compile, OpenVINO's converter on the PyTorch model; in float32 ONNX Runtime plain and with its
  transformer fusions, and ours with XLA), raw text on random batches with every system sorting each batch's
  rows by length (and our OpenVINO export packed and padded), fine-tuning on length-grouped batches, and the
  matmul limit for the MFU column.
- "full": also float32, XLA, other batch sizes and lengths, length-grouped and unsorted raw text, ONNX
  Runtime, fine-tuning on random batches and with albert-finetune's own batches, ALBERT-large against
  BERT-large (several hours).
- "smoke": the default plan at the tiny shape, 2 timed steps: every system runs, in minutes.
- "levers": ours only, in float32 (the precision "auto" picks without bfloat16 arithmetic): each of
  TensorFlow's CPU levers (XLA, oneDNN with TF_ENABLE_ONEDNN_OPTS=1, both) against today's default (neither),
  for training, fine-tuning, full-length encoder inference and the frozen SavedModel graph (`levers_plan`).
  What it decides on an AVX2-only CPU is in docs/benchmarks.md; its run file is <kind>-levers.md.
- "serving": in the kind's precision, one request at a time (batch 1, length 128: every serving system's
  p50/p90/p99 call time, `latency_plan`) and the sweep of batch 1, 8, 32 by length 64, 128, 512 for ours and
  the peers that lead float serving (`sweep_plan`); its run file is <kind>-serving.md.

Same work: every row of a table gets the same batches, precision, threads and (training) masked positions;
each system runs at its best normal use within that (in-batch length sorting for every text path, OpenVINO's
own openvino-tokenizers for its text path, torch.compile for Hugging Face training and fine-tuning). A row
that does other work (albert-finetune's own batches) is shown and left out of every ratio.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import statistics
from typing import Dict, List, Optional, Sequence

from albert_tf.cpu import TENSORFLOW_DEFAULTS
from bench.systems import common

PLANS = ("default", "full", "smoke", "levers", "serving")
GROUPS = ("matmul", "train", "infer", "latency", "sweep", "text", "finetune", "large")
DEFAULT_REPS = 5
OURS = "albert-tf"
HF_COMPILED = "Hugging Face, torch.compile"
OPENVINO = "OpenVINO (HF model, ONNX)"
OPENVINO_OV_TOKENIZER = "OpenVINO (HF model, ONNX), openvino-tokenizers"
OPENVINO_HF_TOKENIZER = "OpenVINO (HF model, ONNX), HF tokenizer"
ONNXRUNTIME = "ONNX Runtime (HF model, ONNX)"
ONNXRUNTIME_FUSED = "ONNX Runtime (HF model, ONNX, transformer fusions)"
OPENVINO_FROM_TORCH = "OpenVINO (HF model, from torch)"
TRAIN_XLA = "albert-tf step, XLA"
INFER_XLA = "albert-tf, XLA"
OURS_OPENVINO = "albert-tf (our OpenVINO export)"
OURS_OPENVINO_PADDED = "albert-tf (our OpenVINO export), padded"
FROZEN = "albert-tf, frozen weights (the exported graph)"
FINETUNE_BUCKETED = "albert-tf, albert-finetune's batches"
# Rows sorted within each batch: the length buckets of our task model, the same for every peer.
SORT_ROWS = 8
TRAIN_STEPS = dict(warmup=2, steps=20)  # at least 20 timed steps for every training figure (issue 18)
# One request at a time: enough calls for a p99 that is not the slowest call alone.
LATENCY_STEPS = dict(warmup=5, steps=100)
SWEEP_BATCHES, SWEEP_LENGTHS = (1, 8, 32), (64, 128, 512)
TEXT_BATCH, TEXT_POOL = 32, 4096
TEXT_STEPS = dict(warmup=2, steps=10)
FINETUNE_STEPS = dict(warmup=2, steps=20)  # torch.compile compiles in the first warm-up step
LARGE_DROPOUT = 0.0  # bert_large's preset has 0.1, albert_large_v2's 0.0: both run at this, the same work
# The tables of the text and fine-tuning groups.
GROUPED = "length-grouped batches"
SORTED = f"random batches, each batch's rows sorted by length, {SORT_ROWS} at a time"
PADDED = "random batches, each padded to its longest row"
EARLIER = "the batches of an earlier version of the suite"  # rows saved without their batch order
# Keys of a measurement's kwargs that do not make it another configuration.
_NOT_IN_KEY = ("sentences", "sentences_file", "pool_file", "spm_path", "warmup", "steps")


@dataclasses.dataclass
class Measurement:
    """One configuration: which table it belongs to, what the worker runs, and its results.

    runs: one dict per repetition that ran, with "rep" (the repetition's index); errors: "rep N: why".
    """

    group: str
    system: str
    module: str  # bench.systems.<module>
    function: str
    kwargs: Dict[str, object]
    runs: List[dict] = dataclasses.field(default_factory=list)
    errors: List[str] = dataclasses.field(default_factory=list)
    skip: str = ""  # why it is not run (a peer not installed)
    env: Dict[str, str] = dataclasses.field(default_factory=dict)  # set in the worker's environment

    @property
    def key(self) -> str:
        settings = ",".join(f"{k}={v}" for k, v in sorted(self.kwargs.items()) if k not in _NOT_IN_KEY)
        env = "".join(f",env:{k}={v}" for k, v in sorted(self.env.items()))
        return f"{self.group}:{self.system}:{self.function}:{settings}{env}"

    def spec(self) -> str:
        return json.dumps({"system": self.module, "function": self.function, "kwargs": self.kwargs})

    def values(self, field: str = "per_s") -> Dict[int, float]:
        """{repetition: value} of the runs that have `field` (runs saved without "rep" count in order)."""
        return {int(r.get("rep", i)): float(r[field]) for i, r in enumerate(self.runs)
                if isinstance(r.get(field), (int, float)) and not isinstance(r.get(field), bool)}

    def median(self, field: str = "per_s") -> Optional[float]:
        values = list(self.values(field).values())
        return statistics.median(values) if values else None

    def maximum(self, field: str) -> Optional[float]:
        values = list(self.values(field).values())
        return max(values) if values else None

    @property
    def precision(self) -> str:
        return str(self.kwargs.get("precision", ""))


def is_ours(m: Measurement) -> bool:
    return m.system.startswith(OURS)


def runtime(m: Measurement) -> str:
    """The runtime a row runs in: tensorflow, torch, torch.compile, openvino or onnxruntime."""
    if m.kwargs.get("runtime"):
        return str(m.kwargs["runtime"])
    if m.module == "ours_openvino" or m.system == "openvino":
        return "openvino"
    if m.module == "hf" or (m.module == "finetune" and m.function == "hf") or m.system == "torch":
        return "torch.compile" if m.kwargs.get("compile") else "torch"
    return "tensorflow"


def sorts_rows(m: Measurement) -> bool:
    """Whether a raw-text row avoids padding each batch to its longest row: our length buckets, our
    export's packed tokens, a peer's sorted rows."""
    if m.module == "ours":
        return not m.kwargs.get("one_padded_batch") and m.kwargs.get("rows_per_bucket", SORT_ROWS) != 0
    if m.module == "ours_openvino":
        return m.kwargs.get("pack_tokens", True) is not False
    return bool(m.kwargs.get("sort_rows"))


def table(m: Measurement) -> str:
    """The table of its group a row is in (rows are compared only within a table)."""
    if m.group in ("text", "finetune"):
        order = m.kwargs.get("feed" if m.group == "text" else "order")
        if order is None:
            return EARLIER
        if order == common.GROUPED:
            return GROUPED
        return SORTED if m.group == "text" and sorts_rows(m) else PADDED
    if m.group in ("train", "infer", "latency", "sweep"):
        return f"batch {m.kwargs['batch']}, length {m.kwargs['seq']}"
    return m.group


def in_ratios(m: Measurement) -> bool:
    """Rows that do the table's work (albert-finetune's own batches are other batches: shown, not compared)."""
    return not (m.group == "finetune" and m.kwargs.get("feed") == "finetune")


def unlike_work(ours: Measurement, peer: Measurement) -> str:
    """Why two rows of one table do not do the same work ("" when they do): a row padding each batch to a
    multiple of common.BUCKET_STEP (keras-hub's pre-packed buckets, in runs before issue 27) beside rows that
    do not.

    >>> a = Measurement("text", "albert-tf task model", "ours", "text", {"feed": "grouped"})
    >>> unlike_work(a, Measurement("text", "keras-hub", "kerashub", "text", {"feed": "grouped", "padding": "bucket"}))
    'keras-hub pads each batch to a multiple of 16'
    """
    bucketed = [m for m in (ours, peer) if m.kwargs.get("padding") == "bucket"]
    if len(bucketed) != 1:
        return ""
    return f"{bucketed[0].system} pads each batch to a multiple of {common.BUCKET_STEP}"


def pairs(rows: Sequence[Measurement]) -> List[tuple]:
    """(ours, peer) for every row of ours and every peer row of one table with the same precision and,
    where both have one, the same XLA setting. No "best of" selection: every pair is shown."""
    out = []
    for ours in (m for m in rows if is_ours(m) and in_ratios(m)):
        for peer in (m for m in rows if not is_ours(m) and in_ratios(m)):
            same_xla = "xla" not in ours.kwargs or "xla" not in peer.kwargs or ours.kwargs["xla"] == peer.kwargs["xla"]
            same_table = (ours.group, table(ours)) == (peer.group, table(peer))
            if same_table and ours.precision == peer.precision and same_xla:
                out.append((ours, peer))
    return out


def missing_package(*names: str) -> str:
    """"" when every name imports here, else the note a skipped row shows."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            return f"not installed: {name} (pip install -e '.[bench]')"
    return ""


# ------------------------------------------------------------------ plans
def kind_precision(kind: str) -> str:
    """The precision a CPU kind's default run measures: what "auto" picks there (`albert_tf.runtime`),
    bfloat16 with bfloat16 arithmetic (amx, avx512-bf16), float32 elsewhere (avx512, avx2).

    >>> kind_precision("amx"), kind_precision("avx2")
    ('bfloat16', 'float32')
    """
    return "bfloat16" if kind in ("amx", "avx512-bf16") else "float32"


def plan(name: str, spm_path: str, pool_file: str, precision: str = "bfloat16",
         kind: str = "") -> List[Measurement]:
    """The measurements of plan `name` (PLANS), in the order each repetition runs them: the matmul limit,
    then one table at a time, ours beside its peers (a pair runs minutes apart, under the same load).

    precision: the default and smoke plans' precision (`kind_precision` of the CPU). In float32 the default
    plan also has ONNX Runtime (plain and with its transformer fusions) and ours with XLA (training and
    inference), the levers and the peer that lead on a CPU without bfloat16 arithmetic.
    kind: the CPU kind; every plan but "levers" runs the TensorFlow rows with its settings
    (`with_tensorflow_defaults`)."""
    if name not in PLANS:
        raise ValueError(f"plan must be one of {PLANS}, got {name!r}.")
    if precision not in ("bfloat16", "float32"):
        raise ValueError(f"precision must be 'bfloat16' or 'float32', got {precision!r}.")
    if name == "levers":
        return levers_plan(spm_path, pool_file)
    if name == "serving":
        return with_tensorflow_defaults(latency_plan(precision, spm_path) + sweep_plan(precision, spm_path), kind)
    full = name == "full"
    if full:
        precision = "bfloat16"
    out = (matmul_plan(full, precision) + train_plan(full, precision) + infer_plan(full, spm_path, precision)
           + text_plan(full, spm_path, pool_file, precision))
    out += finetune_plan(full, spm_path, pool_file, precision) + (large_plan() if full else [])
    out = with_tensorflow_defaults(out, kind)
    return [tiny(m) for m in out] if name == "smoke" else out


def with_tensorflow_defaults(rows: List[Measurement], kind: str) -> List[Measurement]:
    """The rows, each TensorFlow one (ours, keras-hub, the GEMM probe) with the variables albert-tf's binaries
    set on this CPU kind (`albert_tf.cpu.TENSORFLOW_DEFAULTS`: oneDNN on avx2) where the row sets none itself:
    ours runs as its users run it, and keras-hub, on the same TensorFlow, gets the same lever (its best). Our
    SavedModel's rows keep TensorFlow's own defaults: TF Serving runs that graph, not our binaries.

    >>> rows = with_tensorflow_defaults(train_plan(False, "float32"), "avx2")
    >>> sorted({(runtime(m), m.env.get("TF_ENABLE_ONEDNN_OPTS", "-")) for m in rows})
    [('tensorflow', '1'), ('torch', '-'), ('torch.compile', '-')]
    >>> {m.env.get("TF_ENABLE_ONEDNN_OPTS") for m in with_tensorflow_defaults(train_plan(False), "amx")}
    {None}
    """
    defaults = TENSORFLOW_DEFAULTS.get(kind, {})
    return [dataclasses.replace(m, env={**defaults, **m.env}) if uses_binary_defaults(m) and defaults else m
            for m in rows]


def uses_binary_defaults(m: Measurement) -> bool:
    """Whether a row runs where albert-tf's binaries set the CPU kind's TensorFlow variables (or, keras-hub,
    could as well): every TensorFlow row but those of the SavedModel (`serves_saved_model`)."""
    return runtime(m) == "tensorflow" and not serves_saved_model(m)


def serves_saved_model(m: Measurement) -> bool:
    """Whether a row runs the SavedModel albert-tf exports, the graph TF Serving runs: the frozen encoder
    and the raw-text SavedModel."""
    return m.module == "ours" and (bool(m.kwargs.get("frozen")) or m.function == "saved_model_text")


def matmul_plan(full: bool, headline: str = "bfloat16") -> List[Measurement]:
    out = []
    for precision in (("float32", "bfloat16") if full else (headline,)):
        out.append(Measurement("matmul", "tensorflow", "matmul", "tensorflow_rates",
                               dict(precision=precision, reps=8, xla=full)))
        out.append(Measurement("matmul", "openvino", "matmul", "openvino_rates", dict(precision=precision, reps=8),
                               skip=missing_package("openvino")))
        if full:
            out.append(Measurement("matmul", "torch", "matmul", "torch_rates", dict(precision=precision, reps=8),
                                   skip=missing_package("torch")))
    return out


def _train(system: str, precision: str, xla: bool, batch: int, seq: int) -> Measurement:
    kw = dict(precision=precision, batch=batch, seq=seq, **TRAIN_STEPS)
    if system.startswith("Hugging Face"):
        return Measurement("train", system, "hf", "train", dict(kw, compile=system == HF_COMPILED),
                           skip=missing_package("torch", "transformers"))
    if system == "keras-hub fit":
        return Measurement("train", system, "kerashub", "train_fit", dict(kw, xla=xla),
                           skip=missing_package("keras_hub"))
    if system == "albert-tf fit":
        return Measurement("train", system, "ours", "train_fit", dict(kw, xla=xla))
    if system == TRAIN_XLA:
        return Measurement("train", system, "ours", "train_step", dict(kw, xla=True, preset="albert_base_v2"))
    return Measurement("train", system, "ours", "train_step", dict(kw, xla=xla, preset="albert_base_v2"))


TRAIN_SYSTEMS = ("albert-tf step", "keras-hub fit", "Hugging Face", HF_COMPILED)


def train_plan(full: bool, precision: str = "bfloat16") -> List[Measurement]:
    out = [_train(s, precision, False, 8, 128) for s in TRAIN_SYSTEMS]
    if not full:
        return out + ([_train(TRAIN_XLA, precision, True, 8, 128)] if precision == "float32" else [])
    out += [_train("albert-tf fit", "bfloat16", False, 8, 128)]
    out += [_train(s, "float32", False, 8, 128) for s in TRAIN_SYSTEMS + ("albert-tf fit",)]
    out += [_train(s, p, True, 8, 128) for p in ("bfloat16", "float32")
            for s in ("albert-tf step", "albert-tf fit", "keras-hub fit")]
    out += [_train(s, "bfloat16", False, 32, 128) for s in TRAIN_SYSTEMS]
    out += [_train(s, "bfloat16", False, 8, 512) for s in ("albert-tf step", "keras-hub fit", "Hugging Face")]
    return out


def _infer_rows(precision: str, batch: int, steps: Dict[str, int], spm_path: str, xla: bool = False,
                with_ours_openvino: bool = False):
    kw = dict(precision=precision, batch=batch, seq=128, **steps)
    ov = missing_package("openvino")
    rows = [Measurement("infer", OURS, "ours", "infer", dict(kw, xla=xla)),
            Measurement("infer", "keras-hub", "kerashub", "infer", dict(kw, xla=xla),
                        skip=missing_package("keras_hub"))]
    if xla:
        return rows
    rows += [Measurement("infer", FROZEN, "ours", "infer", dict(kw, xla=False, frozen=True)),
             Measurement("infer", OURS_OPENVINO, "ours_openvino", "infer",
                         dict(kw, hint="LATENCY", **({"spm_path": spm_path} if spm_path else {})), skip=ov),
             Measurement("infer", "Hugging Face", "hf", "infer", kw, skip=missing_package("torch", "transformers")),
             Measurement("infer", OPENVINO, "onnx_runtimes", "infer", dict(kw, runtime="openvino", hint="LATENCY"),
                         skip=ov or missing_package("torch", "onnxscript"))]
    return rows if precision == "bfloat16" or with_ours_openvino else [m for m in rows if m.module != "ours_openvino"]


def _best_peer_rows(precision: str, batch: int, steps: Dict[str, int]) -> List[Measurement]:
    """The serving peers at their best: Hugging Face through torch.compile, OpenVINO's own converter on the
    PyTorch model, and (float32) ONNX Runtime plain and with its transformer fusions."""
    kw = dict(precision=precision, batch=batch, seq=128, **steps)
    torch_skip = missing_package("torch", "transformers")
    rows = [Measurement("infer", HF_COMPILED, "hf", "infer", dict(kw, compile=True), skip=torch_skip),
            Measurement("infer", OPENVINO_FROM_TORCH, "onnx_runtimes", "infer",
                        dict(kw, runtime="openvino", hint="LATENCY", source="torch"),
                        skip=torch_skip or missing_package("openvino", "onnxscript"))]
    if precision == "float32":
        ort_skip = missing_package("onnxruntime", "torch", "onnxscript")
        rows += [Measurement("infer", ONNXRUNTIME, "onnx_runtimes", "infer", dict(kw, runtime="onnxruntime"),
                             skip=ort_skip),
                 Measurement("infer", ONNXRUNTIME_FUSED, "onnx_runtimes", "infer",
                             dict(kw, runtime="onnxruntime", fused=True), skip=ort_skip)]
    return rows


def infer_plan(full: bool, spm_path: str = "", precision: str = "bfloat16") -> List[Measurement]:
    """Full-length encoder inference. OpenVINO runs with the LATENCY hint (one synchronous batch gets every
    core; THROUGHPUT makes a stream per core, which a lone request cannot use: full plan only). Every plan
    has the peers at their best (`_best_peer_rows`); float32 also ours with XLA."""
    steps = dict(warmup=2, steps=5)
    out = _infer_rows(precision, 32, steps, spm_path, with_ours_openvino=True) + _best_peer_rows(precision, 32, steps)
    if not full:
        if precision == "float32":
            out.append(Measurement("infer", INFER_XLA, "ours", "infer", dict(precision=precision, batch=32, seq=128,
                                                                             xla=True, **steps)))
        return out
    steps = dict(warmup=2, steps=10)
    out += _infer_rows("bfloat16", 32, steps, spm_path, xla=True)
    for batch in (1, 8):
        out += _infer_rows("bfloat16", batch, steps, spm_path)
    out += _infer_rows("float32", 32, steps, spm_path)
    skip = missing_package("onnxruntime", "torch", "onnxscript")
    kw = dict(batch=32, seq=128, **steps)
    out += [Measurement("infer", ONNXRUNTIME, "onnx_runtimes", "infer", dict(kw, runtime="onnxruntime",
                                                                                precision=p), skip=skip)
            for p in ("float32", "int8")]
    out.append(Measurement("infer", OPENVINO, "onnx_runtimes", "infer",
                           dict(kw, runtime="openvino", precision="bfloat16", hint="THROUGHPUT"),
                           skip=missing_package("openvino", "torch", "onnxscript")))
    return out


def _text_rows(feed: str, sort: bool, spm_path: str, pool_file: str, full: bool,
               precision: str = "bfloat16") -> List[Measurement]:
    """The raw-text rows on `feed`'s batches: ours and each peer, sorting each batch's rows (sort) or padding
    each batch to its longest row (ONNX Runtime in the full plan and wherever the precision is float32)."""
    kw = dict(precision=precision, spm_path=spm_path, pool_file=pool_file, feed=feed, **TEXT_STEPS)
    rows_per_bucket = SORT_ROWS if sort else 0
    sort_rows = dict(sort_rows=SORT_ROWS) if sort else {}
    ov = missing_package("openvino", "openvino_tokenizers")
    hf_ov = missing_package("openvino", "openvino_tokenizers", "torch", "transformers", "onnxscript")
    rows = [Measurement("text", "albert-tf task model", "ours", "text", dict(kw, rows_per_bucket=rows_per_bucket))]
    if sort:
        rows.append(Measurement("text", "albert-tf SavedModel", "ours", "saved_model_text", kw))
    if sort or feed == common.RANDOM:
        rows.append(Measurement("text", OURS_OPENVINO if sort else OURS_OPENVINO_PADDED, "ours_openvino", "text",
                                dict(kw, hint="LATENCY", **({} if sort else {"pack_tokens": False})), skip=ov))
    rows += [Measurement("text", "keras-hub", "kerashub", "text", dict(kw, padding="longest", **sort_rows),
                         skip=missing_package("keras_hub")),
             Measurement("text", "Hugging Face", "hf", "text", dict(kw, **sort_rows),
                         skip=missing_package("torch", "transformers")),
             Measurement("text", OPENVINO_OV_TOKENIZER, "onnx_runtimes", "text",
                         dict(kw, runtime="openvino", hint="LATENCY", tokenizer="openvino", **sort_rows), skip=hf_ov),
             # openvino-tokenizers' conversion splits some text otherwise than AlbertTokenizer (about 3% more
             # tokens on the pool): the same model on AlbertTokenizer's ids as well.
             Measurement("text", OPENVINO_HF_TOKENIZER, "onnx_runtimes", "text",
                         dict(kw, runtime="openvino", hint="LATENCY", tokenizer="hf", **sort_rows), skip=hf_ov)]
    if full or precision == "float32":
        rows += [Measurement("text", ONNXRUNTIME, "onnx_runtimes", "text",
                             dict(kw, runtime="onnxruntime", precision="float32", **sort_rows),
                             skip=missing_package("onnxruntime", "torch", "transformers", "onnxscript"))]
    return rows


def text_plan(full: bool, spm_path: str, pool_file: str, precision: str = "bfloat16") -> List[Measurement]:
    """Raw text. Default: random batches (as a server receives them) with every system sorting each batch's
    rows by length (our task model's buckets; the same for every peer), our OpenVINO export packed, and the
    same export padded (the packing table: our packed export against the same model padded). Full: also every
    system padding each batch to its longest row, and length-grouped batches."""
    out = _text_rows(common.RANDOM, True, spm_path, pool_file, full, precision)
    if not full:
        return out + [m for m in _text_rows(common.RANDOM, False, spm_path, pool_file, False, precision)
                      if m.system == OURS_OPENVINO_PADDED]
    return (out + _text_rows(common.RANDOM, False, spm_path, pool_file, True)
            + _text_rows(common.GROUPED, True, spm_path, pool_file, True))


def finetune_plan(full: bool, spm_path: str, pool_file: str, precision: str = "bfloat16") -> List[Measurement]:
    """Fine-tuning a 2-label classifier on the pool's batches (bench/systems/finetune.py), every system on the
    same batches padded to each batch's longest row: length-grouped (Hugging Face's group_by_length sampler);
    full: also random batches, and ours on albert-finetune's own batches (other batches: no ratio)."""
    kw = dict(precision=precision, spm_path=spm_path, pool_file=pool_file, batch=TEXT_BATCH, shape="base",
              **FINETUNE_STEPS)
    torch_skip = missing_package("torch", "transformers")
    out = []
    for order in ((common.GROUPED, common.RANDOM) if full else (common.GROUPED,)):
        out += [Measurement("finetune", "albert-tf fit", "finetune", "ours", dict(kw, feed="fit", order=order)),
                Measurement("finetune", "keras-hub fit", "finetune", "kerashub", dict(kw, order=order,
                                                                                       padding="longest"),
                            skip=missing_package("keras_hub")),
                Measurement("finetune", "Hugging Face", "finetune", "hf", dict(kw, order=order), skip=torch_skip),
                Measurement("finetune", HF_COMPILED, "finetune", "hf", dict(kw, order=order, compile=True),
                            skip=torch_skip)]
    if full:
        out.append(Measurement("finetune", FINETUNE_BUCKETED, "finetune", "ours",
                               dict(kw, feed="finetune", order=common.GROUPED)))
    return out


def large_plan(batch: int = 8) -> List[Measurement]:
    """ALBERT-large against BERT-large, albert-pretrain's step with the LAMB update timed alone."""
    return [Measurement("large", preset, "ours", "train_step",
                        dict(preset=preset, precision=precision, xla=False, batch=batch, seq=128,
                             dropout=LARGE_DROPOUT, optimizer_alone=True, **TRAIN_STEPS))
            for preset in ("albert_large_v2", "bert_large") for precision in ("float32", "bfloat16")]


# ------------------------------------------------------------------ levers
ONEDNN = {"TF_ENABLE_ONEDNN_OPTS": "1"}
NO_ONEDNN = {"TF_ENABLE_ONEDNN_OPTS": "0"}  # TensorFlow's own default on CPUs without AVX-512 VNNI/BF16 or AMX
# XLA for a graph TensorFlow runs as given (the frozen SavedModel, as TF Serving runs it): auto-clustering.
XLA_AUTO_JIT = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"}
LEVERS = ("default", "XLA", "oneDNN", "XLA + oneDNN")


def lever(m: Measurement) -> str:
    """Which of LEVERS a row of the levers plan pulls ("" for rows of other plans and for the GEMM probe)."""
    if "TF_ENABLE_ONEDNN_OPTS" not in m.env or m.group == "matmul":
        return ""
    xla = bool(m.kwargs.get("xla")) or "TF_XLA_FLAGS" in m.env
    onednn = m.env["TF_ENABLE_ONEDNN_OPTS"] == "1"
    return {(False, False): "default", (True, False): "XLA", (False, True): "oneDNN", (True, True): "XLA + oneDNN"}[
        (xla, onednn)]


def latency_plan(precision: str, spm_path: str) -> List[Measurement]:
    """One request at a time: every serving system of the inference table (ours as Keras, XLA in float32,
    frozen graph and OpenVINO export; the peers, also at their best) answers one full-length sequence per
    call, `LATENCY_STEPS` calls after a warm-up; the report takes p50/p90/p99 of each repetition's calls."""
    rows = _infer_rows(precision, 1, LATENCY_STEPS, spm_path, with_ours_openvino=True)
    rows += _best_peer_rows(precision, 1, LATENCY_STEPS)
    if precision == "float32":
        rows.append(Measurement("infer", INFER_XLA, "ours", "infer",
                                dict(precision=precision, batch=1, seq=128, xla=True, **LATENCY_STEPS)))
    return [dataclasses.replace(m, group="latency") for m in rows]


def sweep_steps(batch: int, seq: int) -> int:
    """Timed calls of a sweep row: about the tokens of 5 calls at batch 32 x 128 (3 to 50 calls).

    >>> sweep_steps(1, 64), sweep_steps(32, 128), sweep_steps(32, 512)
    (50, 5, 3)
    """
    return max(3, min(50, 5 * 32 * 128 // (batch * seq)))


def sweep_plan(precision: str, spm_path: str) -> List[Measurement]:
    """Batch 1, 8, 32 by length 64, 128, 512 (a table each): ours as Keras and as our OpenVINO export against
    OpenVINO's converter on the PyTorch model and, in float32, ONNX Runtime with its transformer fusions."""
    out = []
    for batch in SWEEP_BATCHES:
        for seq in SWEEP_LENGTHS:
            kw = dict(precision=precision, batch=batch, seq=seq, warmup=2, steps=sweep_steps(batch, seq))
            rows = [m for m in _infer_rows(precision, batch, {}, spm_path, with_ours_openvino=True)
                    if m.system in (OURS, OURS_OPENVINO)]
            rows += [m for m in _best_peer_rows(precision, batch, {})
                     if m.system in (OPENVINO_FROM_TORCH, ONNXRUNTIME_FUSED)]
            out += [dataclasses.replace(m, group="sweep", kwargs=dict(m.kwargs, **kw)) for m in rows]
    return out


def levers_plan(spm_path: str, pool_file: str, precision: str = "float32") -> List[Measurement]:
    """Ours with each lever and without (rows named "<system> (<lever>)"; `lever_pairs` gives their ratios):
    training (albert-pretrain's step: XLA and oneDNN), fine-tuning (`fit` on real text: oneDNN only, since its
    in-graph text layer keeps Keras from XLA-compiling it; albert-finetune --jit_compile feeds ids instead, timed
    by hand, docs/benchmarks.md), full-length inference of the Keras encoder (XLA and oneDNN) and of the frozen
    graph a SavedModel serves (oneDNN, and XLA by auto-clustering, the switch TF Serving has), with the GEMM
    probe under each oneDNN setting."""
    out = []
    for env in (NO_ONEDNN, ONEDNN):
        out.append(Measurement("matmul", "tensorflow", "matmul", "tensorflow_rates",
                               dict(precision=precision, reps=8, xla=True), env=dict(env)))
    out.append(Measurement("matmul", "openvino", "matmul", "openvino_rates", dict(precision=precision, reps=8),
                           skip=missing_package("openvino")))
    train = dict(precision=precision, batch=8, seq=128, preset="albert_base_v2", **TRAIN_STEPS)
    infer = dict(precision=precision, batch=32, seq=128, warmup=2, steps=10)
    tune = dict(precision=precision, spm_path=spm_path, pool_file=pool_file, batch=TEXT_BATCH, shape="base",
                feed="fit", order=common.GROUPED, **FINETUNE_STEPS)
    for onednn in (NO_ONEDNN, ONEDNN):
        for xla in (False, True):
            out.append(Measurement("train", "albert-tf step", "ours", "train_step", dict(train, xla=xla),
                                   env=dict(onednn)))
            out.append(Measurement("infer", OURS, "ours", "infer", dict(infer, xla=xla), env=dict(onednn)))
            out.append(Measurement("infer", FROZEN, "ours", "infer", dict(infer, xla=False, frozen=True),
                                   env=dict(onednn, **(XLA_AUTO_JIT if xla else {}))))
        out.append(Measurement("finetune", "albert-tf fit", "finetune", "ours", dict(tune), env=dict(onednn)))
    for m in out:
        if lever(m):
            m.system = f"{m.system} ({lever(m)})"
    return out


def lever_pairs(rows: Sequence[Measurement]) -> List[tuple]:
    """(row with a lever, the same system's default row) within one table: what each lever gains."""
    base = {(m.group, table(m), m.system.rsplit(" (", 1)[0]): m for m in rows if lever(m) == "default"}
    return [(m, base[(m.group, table(m), m.system.rsplit(" (", 1)[0])]) for m in rows
            if lever(m) not in ("", "default") and (m.group, table(m), m.system.rsplit(" (", 1)[0]) in base]


def tiny(m: Measurement) -> Measurement:
    """The smoke plan's version of a measurement: the tiny shape, small batches, 1 + 2 steps."""
    kw = dict(m.kwargs)
    if m.group == "matmul":
        kw.update(tiny=True, reps=2)
    else:
        kw.update(warmup=1, steps=2)
        if m.function == "train_step":
            kw["preset"] = "tiny"
        else:
            kw["shape"] = "tiny"
        if m.group in ("train", "infer", "latency", "sweep"):
            kw.update(batch=min(int(kw["batch"]), 4), seq=min(int(kw["seq"]), 32))
    return dataclasses.replace(m, kwargs=kw, runs=[], errors=[])
