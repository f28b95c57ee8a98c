"""The CPU's kind and what it decides before TensorFlow starts.

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it is imported, and turns oneDNN on by default only on CPUs
with AVX-512 VNNI/BF16 or AMX; `tensorflow_defaults` says what the binaries set, per kind, before that import
(`albert_tf.bin.common`). No TensorFlow here: the binaries call it first.
"""

from __future__ import annotations

import os
from typing import Dict, MutableMapping, Optional

def cpu_flags() -> frozenset:
    """The feature flags of the first CPU in /proc/cpuinfo (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_kind(flags) -> str:
    """The kind of CPU a set of /proc/cpuinfo flags names, by the instructions its matmuls can use.

    "amx" (amx_bf16 and amx_tile: AMX bfloat16 tiles, Intel Sapphire Rapids and later), "avx512-bf16"
    (avx512_bf16 without AMX: AMD Zen 4/5, Intel Cooper Lake), "avx512" (avx512f only), "avx2" (AVX2, no
    AVX-512: AMD Zen 2/3, most laptops), "other". The benchmark keeps its run files under the same names
    (`bench.systems.common.cpu_kind`).

    Args:
        flags: the flag names (any iterable of strings).

    Example:

    >>> cpu_kind("fpu avx2 fma".split()), cpu_kind(["avx512f", "avx512_bf16"]), cpu_kind(["amx_bf16", "amx_tile"])
    ('avx2', 'avx512-bf16', 'amx')
    """
    flags = set(flags)
    if {"amx_bf16", "amx_tile"} <= flags:
        return "amx"
    for flag, kind in (("avx512_bf16", "avx512-bf16"), ("avx512f", "avx512"), ("avx2", "avx2")):
        if flag in flags:
            return kind
    return "other"


# The CPU kinds with bfloat16 arithmetic: "auto" picks bfloat16 there, float32 on every other kind.
BFLOAT16_KINDS = ("amx", "avx512-bf16")


def cpu_precision(flags) -> str:
    """The precision "auto" means on a CPU with these flags (no GPU): bfloat16 on BFLOAT16_KINDS, else float32.

    Args:
        flags: the flag names (any iterable of strings).

    Example:

    >>> cpu_precision("fpu avx2 fma".split()), cpu_precision(["avx512f", "avx512_bf16"])
    ('float32', 'bfloat16')
    """
    return "bfloat16" if cpu_kind(flags) in BFLOAT16_KINDS else "float32"
