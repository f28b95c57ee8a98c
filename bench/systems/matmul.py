"""Dense matmul rates: the limit the model FLOPs utilisation is measured against.

Shapes: two squares and the ALBERT-base FFN products at 8 x 128 tokens (on
some CPUs the model-sized products run faster than a big square). Best of
`reps` per shape: other jobs on a shared machine only ever slow a run down.
"""

from __future__ import annotations

import time
from typing import Dict

SHAPES = ((4096, 4096, 4096), (2048, 2048, 2048), (1024, 768, 3072), (1024, 3072, 768))


def _best(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def tensorflow_rates(precision: str, reps: int = 8) -> Dict[str, float]:
    """GFLOP/s of tf.matmul per shape, TF's kernel and XLA's, in `precision`."""
    import tensorflow as tf

    dtype = getattr(tf, precision)
    out = {}
    for xla in (False, True):
        mm = tf.function(tf.matmul, jit_compile=xla)
        for m, k, n in SHAPES:
            a = tf.cast(tf.random.stateless_normal([m, k], seed=[1, 2]), dtype)
            b = tf.cast(tf.random.stateless_normal([k, n], seed=[3, 4]), dtype)
            seconds = _best(lambda: mm(a, b).numpy(), reps)
            out[f"{'xla' if xla else 'tf'} {m}x{k}x{n}"] = 2.0 * m * k * n / seconds / 1e9
    return out


def torch_rates(precision: str, reps: int = 8) -> Dict[str, float]:
    """GFLOP/s of torch.matmul per shape in `precision` (bfloat16 tensors)."""
    import torch

    dtype = getattr(torch, precision)
    gen = torch.Generator().manual_seed(0)
    out = {}
    for m, k, n in SHAPES:
        a = torch.randn(m, k, generator=gen).to(dtype)
        b = torch.randn(k, n, generator=gen).to(dtype)
        seconds = _best(lambda: torch.matmul(a, b).sum().item(), reps)
        out[f"torch {m}x{k}x{n}"] = 2.0 * m * k * n / seconds / 1e9
    return out
