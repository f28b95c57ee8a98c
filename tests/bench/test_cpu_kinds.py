"""The CPU kinds on the three kinds' flag sets: the library's precision choice (`albert_tf.runtime`) and the
benchmark's run-file name (`bench.systems.common.cpu_kind`) agree, and AVX2 resolves "auto" to float32."""

import pytest

from albert_tf import runtime
from bench.systems import common
from tests.bench import cpu_flags

KINDS = [(cpu_flags.AMX_SAPPHIRE_RAPIDS, "amx", "bfloat16"),
         (cpu_flags.AVX512_BF16_GENOA, "avx512-bf16", "bfloat16"),
         (cpu_flags.AVX2_ZEN3, "avx2", "float32")]


@pytest.mark.parametrize("flags,kind,precision", KINDS)
def test_library_and_benchmark_name_the_kind_alike(flags, kind, precision):
    assert runtime.cpu_kind(flags.split()) == kind
    assert common.cpu_kind(common.parse_cpuinfo(f"flags\t: {flags}\n")) == kind
    assert runtime.cpu_precision(flags.split()) == precision


@pytest.mark.parametrize("flags,kind,precision", KINDS)
def test_auto_precision_on_each_kind(monkeypatch, flags, kind, precision):
    import tensorflow as tf

    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda k=None: [] if k == "GPU" else real(k))
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: frozenset(flags.split()))
    assert runtime.resolve_mixed_precision("auto") == precision
    assert runtime._cpu_has_amx() == (kind == "amx")


def test_kinds_between_and_beyond_the_three():
    assert runtime.cpu_kind(["avx2", "avx512f"]) == common.cpu_kind({"flags": ["avx2", "avx512f"]}) == "avx512"
    assert runtime.cpu_kind(["sse4_2"]) == common.cpu_kind({"flags": ["sse4_2"]}) == "other"
    # AMX needs its tiles as well as the bfloat16 instructions (amx_tile alone, or amx_bf16 alone, is not AMX).
    assert runtime.cpu_kind(["avx512_bf16", "amx_tile"]) == "avx512-bf16"
    assert runtime.cpu_precision(["avx512f"]) == "float32"


def test_the_avx2_machines_cpuinfo_and_lscpu_give_its_clock_and_topology():
    info = common.parse_cpuinfo(cpu_flags.AVX2_CPUINFO)
    assert info == {"model": "AMD EPYC", "mhz": 2445.42, "flags": ["avx2", "fma"]}
    assert common.parse_lscpu(cpu_flags.AVX2_LSCPU) == {"threads_per_core": 1, "cores_per_socket": 2, "sockets": 1}
    amx = common.parse_cpuinfo(f"flags\t: {cpu_flags.AMX_SAPPHIRE_RAPIDS}\n")["flags"]
    assert amx == ["avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8"]
