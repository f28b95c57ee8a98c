"""About how long a plan takes: `python -m bench.run --dry_run` prints it, run files record it.

Seconds of one measurement on a 2-core AVX-512 BF16 CPU in bfloat16 at the default steps, from the wall times
saved in earlier runs (process start, model build, warm-up and timed steps), scaled by the row's steps, batch,
length and precision.
"""

from __future__ import annotations

from typing import Sequence

from bench.plan import Measurement
from bench.systems import common

# (module, function) or (module, function, variant) -> seconds at the group's default steps.
_SECONDS = {("matmul", "tensorflow_rates"): 12, ("matmul", "openvino_rates"): 8, ("matmul", "torch_rates"): 6,
            ("ours", "train_step"): 55, ("ours", "train_fit"): 55, ("kerashub", "train_fit"): 60,
            ("hf", "train"): 50, ("hf", "train", "compile"): 85,
            ("ours", "infer"): 22, ("kerashub", "infer"): 23, ("hf", "infer"): 22, ("ours_openvino", "infer"): 20,
            ("onnx_runtimes", "infer"): 16,
            ("ours", "text"): 22, ("ours", "saved_model_text"): 38, ("ours_openvino", "text"): 18,
            ("kerashub", "text"): 28, ("hf", "text"): 20, ("onnx_runtimes", "text"): 14,
            ("finetune", "ours"): 55, ("finetune", "kerashub"): 60, ("finetune", "hf"): 48,
            ("finetune", "hf", "compile"): 110,
            ("large", "albert_large_v2"): 140, ("large", "bert_large"): 190}
_DEFAULT_STEPS = {"train": 22, "infer": 7, "latency": 7, "sweep": 7, "text": 12, "finetune": 22, "large": 22}
TINY_SECONDS = 10


def expected_seconds(m: Measurement) -> float:
    """About how long one repetition of `m` takes on a 2-core AVX-512 BF16 CPU (the default plan's machine)."""
    if m.skip:
        return 0.0
    if m.kwargs.get("shape") == "tiny" or m.kwargs.get("preset") == "tiny" or m.kwargs.get("tiny"):
        return TINY_SECONDS
    if m.group == "large":
        base = _SECONDS[("large", m.system)]
    else:
        base = _SECONDS.get((m.module, m.function, "compile") if m.kwargs.get("compile") else (m.module, m.function),
                            _SECONDS.get((m.module, m.function), 30))
    if m.group == "matmul":
        return base * (2 if m.kwargs.get("xla") else 1)
    # Start-up is about 12 s; the rest grows with the steps, the batch, the length and float32's slower matmuls.
    work = (int(m.kwargs["warmup"]) + int(m.kwargs["steps"])) / _DEFAULT_STEPS[m.group]
    if m.group in ("train", "infer", "latency", "sweep"):
        work *= int(m.kwargs["batch"]) / (8 if m.group == "train" else 32) * (int(m.kwargs["seq"]) / 128) ** 1.2
    if m.precision == "float32":
        work *= 2.5
    if m.group == "finetune" and m.kwargs.get("order") == common.RANDOM:
        work *= 1.8  # random batches pad to their longest rows
    return 12 + (base - 12) * work


def expected_minutes(measurements: Sequence[Measurement], reps: int) -> float:
    return reps * sum(expected_seconds(m) for m in measurements) / 60
