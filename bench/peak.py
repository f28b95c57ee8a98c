"""The hardware peak a run's MFU divides by: cores x clock x FLOP per cycle per core for the precision.

FLOP per cycle per core is an assumption per CPU kind (`bench.systems.common.cpu_kind`) and precision, stated
in FLOP_PER_CYCLE with its source. Where a kind's CPUs differ, the table takes the fastest of them, so the
peak is an upper bound and MFU is never overstated (on the slower parts the true MFU is higher, by the factor
the note gives). A precision the kind has no arithmetic for (bfloat16 without avx512_bf16 or AMX) runs at
best at the float32 rate, so its peak is the float32 one.

The clock is the CPU's maximum (lscpu "CPU max MHz") where the run recorded it, else the clock
/proc/cpuinfo reports ("cpu MHz": on a virtual machine, what the hypervisor shows, often the base clock; a
CPU boosting above it can then pass "100%", which the run file says). Cores: the threads the run gave every
framework, at most the physical cores (sockets x cores per socket; SMT siblings share one core's FMA units).

The GEMM probe (`bench.systems.matmul`, the best matmul rate measured in the same repetition) is shown
beside it: a measured rate, which a good kernel reaches or passes, not a limit.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from bench import stats
from bench.plan import Measurement
from bench.systems import common

# kind -> precision -> (FLOP per cycle per core, the assumption and its source).
_ZEN3 = ("2 FMA pipes x 256 bits = 2 x 8 float32 lanes x 2 FLOP (AMD, Software Optimization Guide for AMD EPYC "
         "7003 Processors, pub. 56665, floating-point unit: four 256-bit pipes, two of them FMA)")
_AVX512 = ("2 FMA units x 512 bits = 2 x 16 float32 lanes x 2 FLOP (Intel 64 and IA-32 Architectures Optimization "
           "Reference Manual, pub. 248966: server cores with the second, port-5 FMA unit; parts with one unit, "
           "and AMD Zen 4, which runs 512-bit operations as two 256-bit halves, reach half)")
_BF16 = ("2 VDPBF16PS per cycle x 64 FLOP (a 512-bit VDPBF16PS accumulates 16 float32 lanes of 2 bfloat16 "
         "products each: Intel SDM vol. 2, VDPBF16PS); AMD Zen 4 runs it in two 256-bit halves (Software "
         "Optimization Guide for AMD Family 19h Processors, pub. 57647): half this there")
_AMX = ("TDPBF16PS: 16 x 16 x 32 multiply-adds per instruction, one every 16 cycles = 1024 FLOP per cycle per core "
        "(Intel 64 and IA-32 Architectures Optimization Reference Manual, pub. 248966, the Intel AMX chapter)")
_NO_BF16 = "no bfloat16 arithmetic: bfloat16 matmuls run at best at the float32 rate, "
FLOP_PER_CYCLE: Dict[str, Dict[str, Tuple[int, str]]] = {
    "avx2": {"float32": (32, _ZEN3), "bfloat16": (32, _NO_BF16 + _ZEN3)},
    "avx512": {"float32": (64, _AVX512), "bfloat16": (64, _NO_BF16 + _AVX512)},
    "avx512-bf16": {"float32": (64, _AVX512), "bfloat16": (128, _BF16)},
    "amx": {"float32": (64, _AVX512), "bfloat16": (1024, _AMX)},
}


@dataclasses.dataclass
class Peak:
    """A hardware peak and how it was computed."""

    gflops: float
    cores: int
    mhz: float
    clock: str  # "max" (lscpu CPU max MHz) or "reported" (/proc/cpuinfo cpu MHz)
    flop_per_cycle: int
    assumption: str

    def text(self, precision: str) -> str:
        """One line for the run file.

        >>> Peak(156.5, 2, 2445.42, "reported", 32, "x").text("float32")
        'float32: 2 cores x 2445 MHz (reported) x 32 FLOP/cycle = 156 GFLOP/s (x)'
        """
        return (f"{precision}: {self.cores} cores x {self.mhz:.0f} MHz ({self.clock}) x {self.flop_per_cycle} "
                f"FLOP/cycle = {self.gflops:.0f} GFLOP/s ({self.assumption})")


def physical_cores(cpu: Mapping[str, object]) -> Optional[int]:
    """Sockets x cores per socket where recorded, else the logical CPUs over threads per core.

    >>> physical_cores({"cores": 4, "sockets": 1, "cores_per_socket": 2, "threads_per_core": 2})
    2
    >>> physical_cores({"cores": 2}) is None
    True
    """
    if cpu.get("sockets") and cpu.get("cores_per_socket"):
        return int(cpu["sockets"]) * int(cpu["cores_per_socket"])
    if cpu.get("threads_per_core") and cpu.get("cores"):
        return max(1, int(cpu["cores"]) // int(cpu["threads_per_core"]))
    return None


def hardware_peak(cpu: Mapping[str, object], kind: str, precision: str, threads: Optional[int]) -> Optional[Peak]:
    """The peak GFLOP/s for `precision` with `threads` threads, or None when the run did not record the clock
    and topology (runs before issue 33) or the kind has no entry ("other")."""
    cores = physical_cores(cpu)
    mhz = cpu.get("max_mhz") or cpu.get("mhz")
    entry = FLOP_PER_CYCLE.get(kind, {}).get(precision)
    if not cores or not mhz or not entry:
        return None
    used = min(cores, int(threads)) if threads else cores
    flop_per_cycle, assumption = entry
    return Peak(gflops=used * float(mhz) * 1e6 * flop_per_cycle / 1e9, cores=used, mhz=float(mhz),
                clock="max" if cpu.get("max_mhz") else "reported", flop_per_cycle=flop_per_cycle,
                assumption=assumption)


# ------------------------------------------------------------- run files
def peaks(header: Mapping[str, object]) -> Dict[str, Peak]:
    """{precision: hardware peak} of a run's machine and threads (empty for runs that did not record the clock
    and topology)."""
    kind = header.get("cpu_kind") or common.cpu_kind(header["cpu"])
    out = {}
    for precision in ("float32", "bfloat16"):
        p = hardware_peak(header["cpu"], kind, precision, header.get("threads"))
        if p is not None:
            out[precision] = p
    return out


def peak_lines(header: Mapping[str, object]) -> List[str]:
    """The run file's lines on how the hardware peak of each precision was computed, or why there is none."""
    found = peaks(header)
    if not found:
        return ["Hardware peak: not computable for this run (it did not record the clock and topology, or the "
                "kind has no FLOP-per-cycle entry in bench.peak): MFU of hardware peak is n/a.", ""]
    lines = ["Hardware peak (bench.peak): " + "; ".join(p.text(name) for name, p in found.items()) + "."]
    if any(p.clock == "reported" for p in found.values()):
        lines[0] += (" The clock is the one /proc/cpuinfo reports (no maximum recorded): a CPU boosting above it "
                     "can pass 100%.")
    return lines + [""]


def constant_limit(gflops: float, m: Measurement) -> Dict[str, Dict[int, float]]:
    """A limit of `gflops` in every repetition of m (`stats.mfu`'s form; the peak does not change between them)."""
    return {m.precision: {rep: gflops for rep in m.values()}}


def row_shape(m: Measurement) -> Dict[str, int]:
    """The model shape a row runs (its preset or shape, ALBERT-base by default)."""
    return common.model_shape(str(m.kwargs.get("preset") or m.kwargs.get("shape") or "base"))


def row_flops(m: Measurement):
    """FLOPs per item of a training row (3 x forward with the MLM head) or an inference row (forward)."""
    if m.group in ("train", "large"):
        return lambda row: common.training_flops(row_shape(row), int(row.kwargs["seq"]), common.PREDICTIONS_PER_SEQ)
    return lambda row: common.forward_flops(row_shape(row), int(row.kwargs["seq"]), None)


def row_mfu(m: Measurement, against: str, measurements: Sequence[Measurement],
            header: Mapping[str, object]) -> stats.Ratio:
    """A training or inference row's MFU per repetition, as its table shows it: against the run's GEMM probe
    ("mfu") or the hardware peak ("peak")."""
    if m.group not in ("train", "infer"):
        return stats.Ratio([])
    if against == "peak":
        p = peaks(header).get(m.precision)
        return stats.mfu(m, row_flops(m), constant_limit(p.gflops, m) if p else {})
    return stats.mfu(m, row_flops(m), stats.matmul_limits(measurements))
