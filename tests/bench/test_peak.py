"""MFU against the hardware peak (`bench.peak`): cores x clock x FLOP per cycle for the kind and precision,
worked by hand for the three kinds, and the run file's MFU column beside the GEMM probe's share."""

import pytest

from bench import peak, report
from bench import plan as P

AVX2_HERE = {"model": "AMD EPYC", "cores": 2, "flags": ["avx2", "fma"], "mhz": 2445.42, "sockets": 1,
             "cores_per_socket": 2, "threads_per_core": 1}
GENOA = {"model": "AMD EPYC 9B14", "cores": 2, "flags": ["avx2", "fma", "avx512f", "avx512_bf16"], "mhz": 2600.0,
         "max_mhz": 3700.0, "sockets": 1, "cores_per_socket": 2, "threads_per_core": 1}
SAPPHIRE_RAPIDS = {"model": "Intel Xeon", "cores": 4, "flags": ["avx512f", "avx512_bf16", "amx_bf16", "amx_tile"],
                   "mhz": 2000.0, "max_mhz": 3800.0, "sockets": 1, "cores_per_socket": 2, "threads_per_core": 2}


@pytest.mark.parametrize("cpu,kind,precision,threads,gflops,cores,clock", [
    # Zen 3, AVX2 + FMA: 2 FMA pipes x 8 float32 lanes x 2 = 32 FLOP/cycle; 2 cores x 2445.42 MHz x 32.
    (AVX2_HERE, "avx2", "float32", 2, 156.50688, 2, "reported"),
    (AVX2_HERE, "avx2", "bfloat16", 2, 156.50688, 2, "reported"),  # no bfloat16 arithmetic: the float32 peak
    (AVX2_HERE, "avx2", "float32", 1, 78.25344, 1, "reported"),    # one thread: one core
    # AVX-512 BF16: 2 x 64 = 128 bf16 FLOP/cycle, 64 float32; 2 cores x 3700 MHz (lscpu's maximum).
    (GENOA, "avx512-bf16", "bfloat16", 2, 947.2, 2, "max"),
    (GENOA, "avx512-bf16", "float32", 2, 473.6, 2, "max"),
    # AMX: 1024 bf16 FLOP/cycle; 4 logical CPUs, 2 threads per core = 2 physical cores, even with 4 threads.
    (SAPPHIRE_RAPIDS, "amx", "bfloat16", 4, 7782.4, 2, "max"),
    (SAPPHIRE_RAPIDS, "amx", "float32", 4, 486.4, 2, "max"),
])
def test_hardware_peak_worked_by_hand(cpu, kind, precision, threads, gflops, cores, clock):
    p = peak.hardware_peak(cpu, kind, precision, threads)
    assert p.gflops == pytest.approx(gflops) and p.cores == cores and p.clock == clock
    assert p.assumption  # every figure states its assumption and source


def test_no_peak_without_clock_topology_or_a_known_kind():
    old = {"model": "AMD EPYC", "cores": 2, "flags": ["avx2", "avx512f", "avx512_bf16"]}  # a run before issue 33
    assert peak.hardware_peak(old, "avx512-bf16", "bfloat16", 2) is None
    assert peak.hardware_peak(AVX2_HERE, "other", "float32", 2) is None
    assert set(peak.FLOP_PER_CYCLE) == {"avx2", "avx512", "avx512-bf16", "amx"}


def _header(cpu, kind):
    return dict(command="python -m bench.run", date="today", minutes=1.0, load_start=0.5, load_end=0.6, cpu=cpu,
                cpu_kind=kind, plan="default", versions={}, reps=3, threads=2)


def test_the_run_file_shows_mfu_of_the_peak_beside_the_gemm_probe():
    # Full-length inference, float32, 4 / 5 / 6 seq/s of 22.3736 GFLOP each on the 156.507 GFLOP/s peak:
    # 57.2%, 71.5%, 85.8%; against a GEMM probe of 100 GFLOP/s in every repetition: 89%, 112%, 134%.
    matmul = P.Measurement("matmul", "tensorflow", "matmul", "tensorflow_rates", {"precision": "float32"})
    matmul.runs = [{"tf 4096x4096x4096": 100.0, "rep": r} for r in range(3)]
    ours = P.Measurement("infer", "albert-tf", "ours", "infer", dict(precision="float32", xla=False, batch=32, seq=128))
    ours.runs = [dict(per_s=v, rep=r) for r, v in enumerate((4.0, 5.0, 6.0))]
    text = report.render([matmul, ours], _header(AVX2_HERE, "avx2"))
    assert "| 5.00 | 4.00, 5.00, 6.00 | 71% (57-86%) | 112% (89-134%) |" in text
    assert "Hardware peak (bench.peak): float32: 2 cores x 2445 MHz (reported) x 32 FLOP/cycle = 157 GFLOP/s" in text
    assert "a CPU boosting above it can pass 100%" in text
    assert peak.row_mfu(ours, "peak", [matmul, ours], _header(AVX2_HERE, "avx2")).median == pytest.approx(
        5 * 22.373597184 / 156.50688)


def test_an_old_run_has_no_peak_and_says_why():
    old = dict(_header({"model": "AMD EPYC", "cores": 2, "flags": ["avx2"]}, "avx2"))
    assert "Hardware peak: not computable for this run" in "\n".join(peak.peak_lines(old))
