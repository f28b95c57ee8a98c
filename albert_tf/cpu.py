"""The CPU's kind and what it decides before TensorFlow starts.

TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, when it is imported, and turns oneDNN on by default only on CPUs
with AVX-512 VNNI/BF16 or AMX; `TENSORFLOW_DEFAULTS` says what the binaries set, per kind, before that import
(`apply_tensorflow_defaults`, called by `albert_tf.bin.common`). No TensorFlow here: the binaries call it first.
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
    (`bench.systems.common.cpu_kind` calls this).

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


# The variables the binaries set before TensorFlow starts, per CPU kind: a lever's setting becomes a kind's
# default only when two levers runs of that kind read "ahead" for it (docs/benchmarks.md). oneDNN on AVX2:
# bench/results/avx2-levers.md and avx2-levers-2.md.
TENSORFLOW_DEFAULTS: Dict[str, Dict[str, str]] = {"avx2": {"TF_ENABLE_ONEDNN_OPTS": "1"}}


def apply_tensorflow_defaults(environ: Optional[MutableMapping[str, str]] = None,
                              kind: Optional[str] = None) -> Dict[str, str]:
    """Sets the CPU kind's TensorFlow variables (`TENSORFLOW_DEFAULTS`) that are not set yet.

    TensorFlow reads them once, when it is imported, so the binaries call this first. A variable the user
    set, to any value, is left as it is (TF_ENABLE_ONEDNN_OPTS=0 turns oneDNN off again).

    Args:
        environ: the environment to change (default: os.environ).
        kind: the CPU kind (default: this machine's, `cpu_kind(cpu_flags())`).

    Returns:
        The variables set, {} when none.

    Example:

    >>> env = {}
    >>> apply_tensorflow_defaults(env, "avx2"), env
    ({'TF_ENABLE_ONEDNN_OPTS': '1'}, {'TF_ENABLE_ONEDNN_OPTS': '1'})
    >>> apply_tensorflow_defaults({"TF_ENABLE_ONEDNN_OPTS": "0"}, "avx2"), apply_tensorflow_defaults({}, "amx")
    ({}, {})
    """
    environ = os.environ if environ is None else environ
    kind = cpu_kind(cpu_flags()) if kind is None else kind
    chosen = {k: v for k, v in TENSORFLOW_DEFAULTS.get(kind, {}).items() if k not in environ}
    environ.update(chosen)
    return chosen
