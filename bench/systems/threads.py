"""Threads: every framework of a measurement set to the same count, and what each reports kept with the result.

`bench.run` starts every worker with `BENCH_THREADS=N` (`--threads`, default the CPU count),
`OMP_NUM_THREADS=N` and `RAYON_NUM_THREADS=N` (`environment`); each system's function is wrapped in
`uses(...)`, which sets, before the work:

- TensorFlow: intra-op N, inter-op N (TensorFlow's own default on an N-core machine, made explicit);
- torch: `set_num_threads(N)`, `set_num_interop_threads(N)` (torch's default, made explicit);
- and adds to the result `threads`: what each framework in use reports afterwards.

ONNX Runtime (`session_options()`: intra-op N; the default sequential executor uses no inter-op pool) and
OpenVINO (`openvino_config()`: INFERENCE_NUM_THREADS N) take it in their own settings, and their runners add
their own values. A framework already started in this process (a test calling a system in-process) keeps its
threads; the result then shows what it runs with.

Example:
>>> settings(2)["tensorflow_intra_op"], settings(2)["openvino"]
(2, 2)
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Callable, Dict, Iterable

ENV = "BENCH_THREADS"
FRAMEWORKS = ("tensorflow", "torch", "onnxruntime", "openvino")


def count() -> int:
    """The thread count of this process's measurement: $BENCH_THREADS, else the CPU count."""
    value = os.environ.get(ENV, "")
    if value and (not value.isdigit() or int(value) < 1):
        raise ValueError(f"{ENV} must be a positive integer, got {value!r}.")
    return int(value) if value else (os.cpu_count() or 1)


def environment(n: int) -> Dict[str, str]:
    """The environment a worker starts with: the count, OpenMP's (torch reads it at start-up) and Rayon's
    (Hugging Face's Rust tokenizer encodes a batch on a Rayon pool)."""
    return {ENV: str(n), "OMP_NUM_THREADS": str(n), "RAYON_NUM_THREADS": str(n)}


def settings(n: int) -> Dict[str, int]:
    """What every framework is set to for a count of n (the run header shows it; results are checked against it)."""
    return {"tensorflow_intra_op": n, "tensorflow_inter_op": n, "torch": n, "torch_interop": n,
            "onnxruntime_intra_op": n, "openvino": n}


def _tensorflow() -> None:
    import tensorflow as tf

    n = count()
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(n)
    except RuntimeError:  # already started in this process: it keeps its pools (reported as they are)
        pass


def _torch() -> None:
    import torch

    n = count()
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # only settable before the first inter-op work: reported as it is
        pass


def configure(frameworks: Iterable[str]) -> None:
    """Sets TensorFlow's and torch's threads (ONNX Runtime and OpenVINO take theirs in their settings)."""
    for name in frameworks:
        if name not in FRAMEWORKS:
            raise ValueError(f"Unknown framework {name!r}; expected one of {FRAMEWORKS}.")
        {"tensorflow": _tensorflow, "torch": _torch}.get(name, lambda: None)()


def reported(frameworks: Iterable[str] = FRAMEWORKS) -> Dict[str, int]:
    """The threads TensorFlow and torch report in this process (of `frameworks`, those imported; TensorFlow's 0:
    its default)."""
    out: Dict[str, int] = {}
    if "tensorflow" in frameworks and "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        out["tensorflow_intra_op"] = tf.config.threading.get_intra_op_parallelism_threads()
        out["tensorflow_inter_op"] = tf.config.threading.get_inter_op_parallelism_threads()
    if "torch" in frameworks and "torch" in sys.modules:
        torch = sys.modules["torch"]
        out["torch"] = torch.get_num_threads()
        out["torch_interop"] = torch.get_num_interop_threads()
    return out


def uses(*frameworks: str) -> Callable:
    """Decorates a system's function: threads set before it runs, `threads` added to its result."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            configure(frameworks)
            result = fn(*args, **kwargs)
            return dict(result, threads=dict(reported(frameworks), **result.get("threads", {})))
        wrapper.frameworks = frameworks
        return wrapper
    return decorate


def session_options():
    """ONNX Runtime's SessionOptions with intra-op threads set to count()."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = count()
    options.inter_op_num_threads = 1
    return options


def openvino_config() -> Dict[str, int]:
    """OpenVINO's compile settings for the thread count."""
    return {"INFERENCE_NUM_THREADS": count()}


def mismatches(recorded: Dict[str, int], n: int) -> Dict[str, int]:
    """The recorded values that differ from settings(n) (a framework that ran with other threads).

    >>> mismatches({"torch": 2, "tensorflow_intra_op": 0}, 2)
    {'tensorflow_intra_op': 0}
    """
    want = settings(n)
    return {k: v for k, v in recorded.items() if k in want and v != want[k]}
