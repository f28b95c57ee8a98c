"""Dense matmul rates: the limit the model FLOPs utilisation is measured against.

Shapes: two squares and the ALBERT-base FFN products at 8 x 128 tokens (on
some CPUs the model-sized products run faster than a big square). Each rate is
the MEDIAN call of `reps` timed calls (after one untimed), the statistic of the
throughputs it divides (`common.per_second`: the median step). `bench.run`
measures it in every repetition, and each row's MFU in a repetition divides by
that repetition's limit (`bench.stats.mfu`).
"""

from __future__ import annotations

import statistics
import time
from typing import Dict

import numpy as np

from bench.systems import threads

SHAPES = ((4096, 4096, 4096), (2048, 2048, 2048), (1024, 768, 3072), (1024, 3072, 768))
# The smoke plan's shapes (seconds, not minutes).
TINY_SHAPES = ((256, 256, 256), (128, 64, 192))


def _median_seconds(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _shapes(tiny: bool):
    return TINY_SHAPES if tiny else SHAPES


@threads.uses("tensorflow")
def tensorflow_rates(precision: str, reps: int = 8, xla: bool = True, tiny: bool = False) -> Dict[str, float]:
    """GFLOP/s of tf.matmul per shape, TF's kernel ("tf <m>x<k>x<n>") and, with xla, XLA's ("xla ...")."""
    import tensorflow as tf

    dtype = getattr(tf, precision)
    out = {}
    for jit in ((False, True) if xla else (False,)):
        mm = tf.function(tf.matmul, jit_compile=jit)
        for m, k, n in _shapes(tiny):
            a = tf.cast(tf.random.stateless_normal([m, k], seed=[1, 2]), dtype)
            b = tf.cast(tf.random.stateless_normal([k, n], seed=[3, 4]), dtype)
            seconds = _median_seconds(lambda: mm(a, b).numpy(), reps)
            out[f"{'xla' if jit else 'tf'} {m}x{k}x{n}"] = 2.0 * m * k * n / seconds / 1e9
    return out


@threads.uses("torch")
def torch_rates(precision: str, reps: int = 8, tiny: bool = False) -> Dict[str, float]:
    """GFLOP/s of torch.matmul per shape in `precision` (shown, not used as a limit)."""
    import torch

    dtype = getattr(torch, precision)
    gen = torch.Generator().manual_seed(0)
    out = {}
    for m, k, n in _shapes(tiny):
        a = torch.randn(m, k, generator=gen).to(dtype)
        b = torch.randn(k, n, generator=gen).to(dtype)
        seconds = _median_seconds(lambda: torch.matmul(a, b).sum().item(), reps)
        out[f"torch {m}x{k}x{n}"] = 2.0 * m * k * n / seconds / 1e9
    return out


@threads.uses()
def openvino_rates(precision: str, reps: int = 8, tiny: bool = False) -> Dict[str, float]:
    """OpenVINO's GFLOP/s per shape ("openvino <m>x<k>x<n>"): one MatMul of a float32 input by a
    constant [k, n] weight (as a dense layer), compiled for one synchronous request (LATENCY) in
    `precision` (INFERENCE_PRECISION_HINT bf16 or f32) with the measurement's threads."""
    import openvino as ov
    import openvino.opset15 as ops

    rng = np.random.default_rng(0)
    core = ov.Core()
    out: Dict[str, object] = {}
    for m, k, n in _shapes(tiny):
        a = ops.parameter([m, k], ov.Type.f32, name="a")
        b = ops.constant(rng.standard_normal((k, n), dtype=np.float32))
        compiled = core.compile_model(ov.Model([ops.matmul(a, b, False, False)], [a], "matmul"), "CPU", {
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16" if precision == "bfloat16" else "f32",
            **threads.openvino_config()})
        request = compiled.create_infer_request()
        x = rng.standard_normal((m, k), dtype=np.float32)
        seconds = _median_seconds(lambda: request.infer({0: x}), max(1, reps))
        out[f"openvino {m}x{k}x{n}"] = 2.0 * m * k * n / seconds / 1e9
        out["threads"] = {"openvino": int(compiled.get_property("INFERENCE_NUM_THREADS"))}
    return out
