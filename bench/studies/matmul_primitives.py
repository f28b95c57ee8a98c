"""Which oneDNN kernel runs each form of a dense layer, and how fast (issue 18).

Study (2026-12-01). Question: Which oneDNN kernel runs each form of a dense layer, and how fast? Answer: with
variable weights TensorFlow runs a fused MatMul + BiasAdd as an inner product that loses to a plain matmul on
AMX, with constant weights (a frozen graph) the fused form wins; albert_tf/layers/fused.py follows it
(bench/results/matmul_primitives.json, performance_notes.md). Command: `python -m
bench.studies.matmul_primitives --tokens 4096 --kernels`.

TensorFlow's oneDNN build runs a fused `MatMul + BiasAdd (+ GELU)` as an inner
product and a plain `MatMul` as a matmul; which kernel each gets depends on
whether the weights are graph constants. This times, for ALBERT's dense shapes
at `--tokens` rows (batch x length), in bfloat16:

- `fused`: MatMul + BiasAdd (+ GELU) on variable weights (a model's graph),
- `fused_const`: the same on constant weights (a frozen graph),
- `matmul`: MatMul alone,
- `matmul_add`: MatMul, then the bias added apart, as `dense_2d(...,
  fuse_bias=False)` does.

Each variant is timed in turn, round after round (medians, ms). With
`--kernels`, a child process runs each variant once with ONEDNN_VERBOSE=1 and
the table names the oneDNN kernel of its matmul (e.g. `x64:gemm:jit` or
`brg_matmul:avx10_1_512_amx`).

    python -m bench.studies.matmul_primitives --tokens 4096 --kernels
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

SHAPES = {"projection [H,H]": (768, 768), "ffn in [H,I] + GELU": (768, 3072), "ffn out [I,H]": (3072, 768)}
VARIANTS = ("fused", "fused_const", "matmul", "matmul_add")
_MARK = "### variant "
_END = "### end"


def _functions(tokens: int, shapes: Dict[str, tuple], seed: int = 0):
    """(shape, variant) -> a tf.function of no arguments."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    functions = {}
    for shape_name, (k, n) in shapes.items():
        x = tf.constant(rng.normal(size=(tokens, k)), tf.bfloat16)
        w_np = (rng.normal(size=(k, n)) * 0.02).astype(np.float32)
        b_np = rng.normal(size=(n,)).astype(np.float32)
        w, b = tf.Variable(w_np), tf.Variable(b_np)
        gelu = "GELU" in shape_name
        act = (lambda y: tf.nn.gelu(y, approximate=True)) if gelu else (lambda y: y)

        def make(variant, x=x, w=w, b=b, w_np=w_np, b_np=b_np, act=act, n=n):
            def run():
                if variant == "fused_const":
                    kernel, bias = tf.constant(w_np, tf.bfloat16), tf.constant(b_np, tf.bfloat16)
                else:
                    kernel, bias = tf.cast(w, tf.bfloat16), tf.cast(b, tf.bfloat16)
                y = tf.matmul(x, kernel)
                if variant == "matmul":
                    return y
                if variant == "matmul_add":
                    return act(tf.reshape(tf.reshape(y, [1, -1, n]) + bias, [-1, n]))
                return act(tf.nn.bias_add(y, bias))
            return tf.function(run)

        for variant in VARIANTS:
            functions[(shape_name, variant)] = make(variant)
    return functions


def time_variants(tokens: int, rounds: int, calls: int, shapes=None) -> Dict[str, Dict[str, float]]:
    """shape -> variant -> median ms per call."""
    functions = _functions(tokens, shapes or SHAPES)
    for fn in functions.values():
        fn().numpy()
    times: Dict[tuple, List[float]] = {key: [] for key in functions}
    for _ in range(rounds):
        for key, fn in functions.items():
            start = time.perf_counter()
            for _ in range(calls):
                out = fn()
            out.numpy()
            times[key].append((time.perf_counter() - start) / calls * 1000)
    table: Dict[str, Dict[str, float]] = {}
    for (shape_name, variant), values in times.items():
        table.setdefault(shape_name, {})[variant] = statistics.median(values)
    return table


def parse_kernels(verbose_output: str) -> Dict[str, str]:
    """Marker-delimited ONEDNN_VERBOSE output -> "shape|variant" -> kernels.

    The kernel of a primitive is the 7th field of an
    `onednn_verbose,v1,primitive,exec,cpu,<primitive>,<kernel>,...` line;
    reorders (layout copies) are left out.

    Example:
    >>> out = ("### variant a|fused\\nonednn_verbose,v1,primitive,exec,cpu,inner_product,x64:gemm:jit,fwd\\n"
    ...        "### end\\nonednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,x")
    >>> parse_kernels(out)
    {'a|fused': 'inner_product x64:gemm:jit'}
    """
    kernels: Dict[str, List[str]] = {}
    current = None
    for line in verbose_output.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK):].strip()
            kernels.setdefault(current, [])
        elif line.startswith(_END):
            current = None
        elif current and line.startswith("onednn_verbose,v1,primitive,exec,cpu,"):
            fields = line.split(",")
            if len(fields) > 6 and fields[5] != "reorder":
                name = f"{fields[5]} {fields[6]}"
                if name not in kernels[current]:
                    kernels[current].append(name)
    return {key: ", ".join(names) or "-" for key, names in kernels.items()}


def _child_kernels(tokens: int) -> None:
    """Runs each variant once after its marker (ONEDNN_VERBOSE is set by the parent)."""
    functions = _functions(tokens, SHAPES)
    for (shape_name, variant), fn in functions.items():
        fn().numpy()  # first call: tracing and primitive creation
        sys.stdout.flush()
        os.write(1, f"{_MARK}{shape_name}|{variant}\n".encode())
        fn().numpy()
        sys.stdout.flush()
        os.write(1, f"{_END}\n".encode())


def kernels(tokens: int) -> Dict[str, str]:
    env = dict(os.environ, ONEDNN_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-m", "bench.studies.matmul_primitives", "--child_kernels", "--tokens", str(tokens)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return parse_kernels(out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=4096, help="rows: batch x length (4096 = 32 x 128)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="timed calls per variant per round")
    parser.add_argument("--kernels", action="store_true", help="also name each variant's oneDNN kernel")
    parser.add_argument("--child_kernels", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the table here")
    args = parser.parse_args(argv)
    if args.tokens < 1 or args.rounds < 1 or args.calls < 1:
        parser.error(f"--tokens, --rounds and --calls must be >= 1, got {args.tokens}, {args.rounds}, {args.calls}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.child_kernels:
        _child_kernels(args.tokens)
        return
    names = kernels(args.tokens) if args.kernels else {}
    table = time_variants(args.tokens, args.rounds, args.calls)
    print(f"bfloat16, {args.tokens} rows, {args.rounds} rounds x {args.calls} calls, medians in ms; "
          f"1-min load {os.getloadavg()[0]:.2f}")
    print("| shape | variant | ms | vs fused | oneDNN kernel |\n|---|---|---|---|---|")
    for shape_name, row in table.items():
        for variant in VARIANTS:
            kernel = names.get(f"{shape_name}|{variant}", "")
            print(f"| {shape_name} | {variant} | {row[variant]:.2f} | {row['fused'] / row[variant]:.2f}x | {kernel} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens": args.tokens, "ms": table, "kernels": names}, f, indent=1)


if __name__ == "__main__":
    main()
