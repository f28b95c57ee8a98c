"""Where and how a run computes: distribution strategy, chief worker, precision.

Shared by pretraining (`albert_tf.training`), fine-tuning and export, so that
every binary reads --strategy / --mixed_precision the same way.

Example:

>>> get_strategy("default").num_replicas_in_sync
1
>>> resolve_mixed_precision("float16"), dtype_policy_name("bfloat16")
('float16', 'mixed_bfloat16')
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import tensorflow as tf

from albert_tf.cpu import BFLOAT16_KINDS, cpu_flags, cpu_kind, cpu_precision  # noqa: F401

MIXED_PRECISION_CHOICES = ("auto", "float32", "bfloat16", "float16")
STRATEGY_CHOICES = ("default", "mirrored", "multi_worker_mirrored", "tpu")
_DTYPE_POLICIES = {
    "float32": "float32",
    "bfloat16": "mixed_bfloat16",
    "float16": "mixed_float16",
}


def split_cpu(num_devices: int) -> None:
    """Splits the CPU into `num_devices` logical devices (replicas for
    "mirrored" on a machine without a GPU, e.g. to check multi-replica runs).

    Must run before TensorFlow initialises its devices (the first op).

    Args:
        num_devices: logical CPU devices wanted (>= 1).

    Raises:
        ValueError: num_devices < 1, or the devices were already initialised
            with another count.

    Example:

    >>> split_cpu(len(tf.config.list_logical_devices("CPU")))  # already so: no-op
    """
    if num_devices < 1:
        raise ValueError(f"--num_cpu_devices={num_devices}; expected at least 1.")
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu)
    if configured is not None and len(configured) == num_devices:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_devices)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have != num_devices:
            raise ValueError(
                f"--num_cpu_devices={num_devices}: TensorFlow already runs "
                f"with {have} CPU device(s); split the CPU before the first "
                "TensorFlow op.") from None


def get_strategy(name: str = "default", tpu: Optional[str] = None,
                 num_gpus: Optional[int] = None,
                 num_cpu_devices: Optional[int] = None) -> tf.distribute.Strategy:
    """Creates the `tf.distribute` strategy named by --strategy.

    Args:
        name: "default" (no distribution), "mirrored" (one host, several
            devices), "multi_worker_mirrored" (several hosts; reads TF_CONFIG)
            or "tpu".
        tpu: TPU name or grpc:// address for "tpu" ("" = local TPU).
        num_gpus: GPUs for "mirrored"; None uses all GPUs, or all logical CPU
            devices when there is no GPU.
        num_cpu_devices: for "mirrored" on a machine without a GPU: split
            the CPU into this many logical devices first (`split_cpu`), one
            replica each. Ignored when there is a GPU.

    Returns:
        The strategy.

    Raises:
        ValueError: an unknown name, or more GPUs asked for than found.

    Example:

    >>> get_strategy("default").num_replicas_in_sync
    1
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if num_cpu_devices and not tf.config.list_physical_devices("GPU"):
            split_cpu(num_cpu_devices)
        gpus = tf.config.list_logical_devices("GPU")
        if num_gpus is not None:
            if num_gpus > len(gpus):
                raise ValueError(
                    f"--num_gpus={num_gpus} but only {len(gpus)} GPU(s) found.")
            gpus = gpus[:num_gpus]
        devices = [d.name for d in gpus] or [
            d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(
        f"Unknown strategy {name!r}; expected one of {', '.join(STRATEGY_CHOICES)}.")


def worker_task(strategy: tf.distribute.Strategy) -> Tuple[Optional[str], int]:
    """(task_type, task_id) of this process in a multi-worker run, else (None, 0).

    Example:

    >>> worker_task(tf.distribute.get_strategy())
    (None, 0)
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None, 0
    return resolver.task_type, int(resolver.task_id or 0)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes checkpoints, summaries and results.

    Example:

    >>> is_chief(tf.distribute.get_strategy())
    True
    """
    task_type, task_id = worker_task(strategy)
    if task_type is None or task_type == "chief":
        return True
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and "chief" not in spec


def _cpu_flags() -> frozenset:
    """This machine's CPU flags (`albert_tf.cpu.cpu_flags`; a seam the tests replace)."""
    return cpu_flags()


def _cpu_has_amx() -> bool:
    return cpu_kind(_cpu_flags()) == "amx"


def _cpu_has_fast_bfloat16() -> bool:
    """AMX tiles or AVX-512 bfloat16 dot products (`BFLOAT16_KINDS`).

    Measured (bench/results/avx512-bf16.md): with avx512_bf16 and no AMX, oneDNN's
    bfloat16 matmuls run at about twice the float32 rate and ALBERT-base
    trains about 1.7x faster in mixed bfloat16; without either, bfloat16 is
    emulated and runs at half the float32 speed.
    """
    return cpu_precision(_cpu_flags()) == "bfloat16"


def default_jit_compile() -> bool:
    """Whether XLA is the faster default here: on a GPU or TPU, never on a CPU.

    On CPUs XLA's dots do not beat TensorFlow's oneDNN kernels, and with
    bfloat16 they run at about half their speed (bench/results/amx.md, avx512-bf16.md).

    Example:

    >>> default_jit_compile() in (True, False)
    True
    """
    return bool(tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU"))


# Compute capability from which a GPU has bfloat16 tensor cores (Ampere,
# sm_80); from 7.0 (Volta, Turing) it has float16 tensor cores only.
_BFLOAT16_MIN_CAPABILITY = (8, 0)
_FLOAT16_MIN_CAPABILITY = (7, 0)


def gpu_compute_capabilities() -> List[Optional[Tuple[int, int]]]:
    """(major, minor) of each visible GPU; None where TensorFlow does not say.

    Example:

    >>> isinstance(gpu_compute_capabilities(), list)
    True
    """
    out = []
    for gpu in tf.config.list_physical_devices("GPU"):
        cc = tf.config.experimental.get_device_details(gpu).get("compute_capability")
        out.append(tuple(int(x) for x in cc) if cc else None)
    return out


def gpu_precision(capabilities: Sequence[Optional[Tuple[int, int]]]) -> str:
    """The "auto" precision for GPUs of these compute capabilities.

    The slowest GPU decides, since every replica runs the same program:
    bfloat16 from 8.0 (A100, RTX 30xx, L4, H100: bfloat16 tensor cores, no
    loss scaling needed); float16 with loss scaling on 7.x (V100, T4, RTX
    20xx: float16 tensor cores only, bfloat16 would be emulated); float32
    below 7.0 (Pascal and older: no tensor cores, and float16 arithmetic on
    most of them runs far below the float32 rate) and for a GPU whose
    capability TensorFlow does not report (e.g. ROCm builds): the safe choice.

    Args:
        capabilities: one (major, minor) or None per GPU; not empty.

    Example:

    >>> gpu_precision([(9, 0)]), gpu_precision([(8, 0), (7, 5)]), gpu_precision([(6, 1)])
    ('bfloat16', 'float16', 'float32')
    """
    if not capabilities:
        raise ValueError("gpu_precision needs at least one GPU's capability.")
    if any(cc is None for cc in capabilities):
        return "float32"
    slowest = min(capabilities)
    if slowest >= _BFLOAT16_MIN_CAPABILITY:
        return "bfloat16"
    if slowest >= _FLOAT16_MIN_CAPABILITY:
        return "float16"
    return "float32"


def resolve_mixed_precision(choice: str) -> str:
    """The compute precision a --mixed_precision choice means on this machine.

    "auto" on GPUs follows their generation (`gpu_precision`: bfloat16 from
    compute capability 8.0, float16 with loss scaling on 7.x, float32 below);
    on a CPU it is bfloat16 with bfloat16 arithmetic (AMX or avx512_bf16 in
    /proc/cpuinfo) and float32 elsewhere: without them, bfloat16 matmuls on
    a CPU are slower than float32 ones.

    Args:
        choice: one of MIXED_PRECISION_CHOICES.

    Returns:
        "float32", "bfloat16" or "float16".

    Raises:
        ValueError: an unknown choice.

    Example:

    >>> resolve_mixed_precision("float32")
    'float32'
    >>> resolve_mixed_precision("auto") in ("float32", "bfloat16", "float16")
    True
    """
    if choice in _DTYPE_POLICIES:
        return choice
    if choice != "auto":
        raise ValueError(
            f"--mixed_precision={choice!r}; expected one of "
            f"{', '.join(MIXED_PRECISION_CHOICES)}.")
    capabilities = gpu_compute_capabilities()
    if capabilities:
        return gpu_precision(capabilities)
    if _cpu_has_fast_bfloat16():
        return "bfloat16"
    return "float32"


def dtype_policy_name(mixed_precision: str) -> str:
    """The Keras dtype policy of a resolved precision ("bfloat16" -> "mixed_bfloat16").

    Args:
        mixed_precision: "float32", "bfloat16" or "float16" (resolve "auto"
            first with `resolve_mixed_precision`).

    Raises:
        ValueError: another value.

    Example:

    >>> dtype_policy_name("float16")
    'mixed_float16'
    """
    if mixed_precision not in _DTYPE_POLICIES:
        raise ValueError(
            f"mixed_precision={mixed_precision!r}; expected one of "
            f"{', '.join(sorted(_DTYPE_POLICIES))} (resolve 'auto' with "
            "resolve_mixed_precision).")
    return _DTYPE_POLICIES[mixed_precision]
