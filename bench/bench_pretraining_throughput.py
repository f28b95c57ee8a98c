"""Pretraining throughput of ALBERT-base at sequence length 128 (issue 4).

Runs the real training step of `albert_tf.training.run_pretraining` (forward,
backward, all-reduce, LAMB with clipping) on synthetic in-memory batches, for
float32 and bfloat16, with and without XLA (--jit_compile), and reports:

* sequences/s: median over the timed steps (each step is timed on its own,
  after --warmup_steps steps that include tracing / XLA compilation);
* model FLOPs utilisation (MFU): the model's training FLOPs per second
  (3 x forward matmul FLOPs, counted below) divided by this machine's measured
  dense matmul rate in the same dtype (a 4096x4096 tf.matmul, median of
  repetitions), so MFU says how close the step gets to what TF's matmul
  reaches here.

Results go to bench/results/pretraining_throughput.md (with the command).

Run from the repository root (a few minutes on 2 cores):
    python bench/bench_pretraining_throughput.py --batch_size 8 --steps 5
"""

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import albert_tf  # noqa: E402
from albert_tf import training  # noqa: E402


def training_flops_per_sequence(cfg, seq: int, preds: int) -> float:
    """Matmul FLOPs of one training step per sequence (3 x forward).

    Forward: embedding projection 2*T*E*H; per layer (weights shared, compute
    not): Q, K, V, O projections 8*T*H^2, scores and weighted sum 4*T^2*H, FFN
    4*T*H*I; pooler 2*H^2; MLM head on the P predicted positions
    2*P*(H*E + E*V); SOP 2*H*2. Backward is counted as twice the forward.
    """
    h, e, i, v = (cfg.hidden_size, cfg.embedding_size, cfg.intermediate_size,
                  cfg.vocab_size)
    layer = 8 * seq * h * h + 4 * seq * seq * h + 4 * seq * h * i
    forward = (2 * seq * e * h + cfg.num_hidden_layers * layer + 2 * h * h +
               2 * preds * (h * e + e * v) + 4 * h)
    return 3.0 * forward


MATMUL_SHAPES = ((4096, 4096, 4096), (2048, 2048, 2048),
                 # ALBERT-base FFN shapes at batch 8 x 128 tokens
                 (1024, 768, 3072), (1024, 3072, 768))


def matmul_rate(dtype: tf.DType, m: int, k: int, n: int, xla: bool,
                reps: int = 10) -> float:
    """Best FLOP/s of an [m, k] x [k, n] tf.matmul in `dtype` over `reps`.

    Best, not median: on a shared machine other jobs only ever slow a run
    down, so the fastest repetition is the closest to this machine's rate.
    """
    a = tf.cast(tf.random.normal([m, k], seed=1), dtype)
    b = tf.cast(tf.random.normal([k, n], seed=2), dtype)

    @tf.function(jit_compile=xla)
    def mm(x, y):
        return tf.matmul(x, y)

    mm(a, b).numpy()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        mm(a, b).numpy()
        times.append(time.perf_counter() - start)
    return 2.0 * m * k * n / min(times)


def synthetic_dataset_fn(batch: int, seq: int, preds: int, vocab: int):
    rng = np.random.default_rng(0)
    example = {
        "input_ids": rng.integers(5, vocab, size=(batch, seq)).astype("int32"),
        "input_mask": np.ones((batch, seq), "int32"),
        "segment_ids": (np.arange(seq)[None, :] >= seq // 2).repeat(
            batch, 0).astype("int32"),
        "masked_lm_positions": np.sort(rng.choice(
            np.arange(1, seq), size=(batch, preds)), axis=1).astype("int32"),
        "masked_lm_ids": rng.integers(5, vocab, size=(batch, preds)).astype(
            "int32"),
        "masked_lm_weights": np.ones((batch, preds), "float32"),
        "next_sentence_labels": rng.integers(0, 2, size=(batch,)).astype(
            "int32"),
    }

    def dataset_fn(ctx):
        per_replica = ctx.get_per_replica_batch_size(batch)
        sliced = {k: v[:per_replica] for k, v in example.items()}
        return tf.data.Dataset.from_tensors(sliced).repeat()

    return dataset_fn


def measure(cfg, precision: str, jit: bool, batch: int, seq: int, preds: int,
            warmup: int, steps: int) -> dict:
    per_step = []

    def on_log(metrics):
        if metrics["step"] > warmup:
            per_step.append(metrics["examples_per_second"])

    with tempfile.TemporaryDirectory() as out:
        training.run_pretraining(
            cfg, synthetic_dataset_fn(batch, seq, preds, cfg.vocab_size), out,
            optimization=training.OptimizationConfig(
                train_batch_size=batch, num_train_steps=warmup + steps,
                num_warmup_steps=1, learning_rate=1e-4),
            runtime=training.RuntimeConfig(
                mixed_precision=precision, jit_compile=jit, log_steps=1,
                save_checkpoints_steps=10 ** 9),
            data=training.PretrainingDataConfig(
                max_seq_length=seq, max_predictions_per_seq=preds),
            log_callback=on_log)
    return {"median": statistics.median(per_step), "min": min(per_step),
            "max": max(per_step), "n": len(per_step)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="albert_base_v2")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--warmup_steps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--precisions", default="float32,bfloat16")
    parser.add_argument("--xla", default="off,on")
    parser.add_argument("--output", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "results",
        "pretraining_throughput.md"))
    args = parser.parse_args()

    cfg = albert_tf.AlbertConfig.from_preset(args.preset)
    flops = training_flops_per_sequence(cfg, args.seq_length, args.predictions)
    # The MFU denominator is the best measured rate over a few shapes (a
    # single large square matmul is not the fastest case on every CPU: here
    # bfloat16 4096^3 runs slower than the model-sized products).
    load_start = os.getloadavg()[0]
    # TF's own kernel and XLA's: XLA's bfloat16 dot is the faster one here.
    rates = {(dt, xla): {shape: matmul_rate(getattr(tf, dt), *shape, xla=xla)
                         for shape in MATMUL_SHAPES}
             for dt in ("float32", "bfloat16") for xla in (False, True)}
    peaks = {dt: max(max(rates[(dt, x)].values()) for x in (False, True))
             for dt in ("float32", "bfloat16")}
    rows = []
    for precision in args.precisions.split(","):
        for xla in args.xla.split(","):
            r = measure(cfg, precision, xla == "on", args.batch_size,
                        args.seq_length, args.predictions, args.warmup_steps,
                        args.steps)
            achieved = r["median"] * flops
            best = r["max"] * flops
            rows.append((precision, xla, r, achieved, best / peaks[precision]))
            print(f"{precision} xla={xla}: {r['median']:.2f} seq/s "
                  f"(min {r['min']:.2f}, max {r['max']:.2f}), "
                  f"{achieved / 1e9:.0f} GFLOP/s, "
                  f"MFU {100 * best / peaks[precision]:.1f}%", flush=True)

    base = rows[0][2]["median"]
    cpu = platform.processor() or platform.machine()
    amx = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read().splitlines()
        cpu = next(l.split(":", 1)[1].strip() for l in info
                   if l.startswith("model name"))
        flags_line = next(l for l in info if l.startswith("flags"))
        amx = "yes" if "amx_bf16" in flags_line else "no"
    except (OSError, StopIteration):
        pass
    lines = [
        "# Pretraining throughput: ALBERT-base, sequence length 128",
        "",
        "Command (from the repository root):",
        "",
        "```",
        "python bench/bench_pretraining_throughput.py " + " ".join(
            sys.argv[1:]),
        "```",
        "",
        f"Machine: {os.cpu_count()} CPU cores ({cpu}, AMX: {amx}), TensorFlow "
        f"{tf.__version__}; 1-minute load average {load_start:.2f} at the "
        f"start, {os.getloadavg()[0]:.2f} at the end (the machine is shared "
        "with other jobs, so figures vary from run to run).",
        f"Model: {args.preset} ({cfg.num_hidden_layers} layers, H "
        f"{cfg.hidden_size}, E {cfg.embedding_size}, V {cfg.vocab_size}); "
        f"global batch {args.batch_size}, {args.predictions} masked positions "
        "per sequence, LAMB, the real `run_pretraining` step on synthetic "
        "in-memory batches. Sequences/s: median of "
        f"{args.steps} timed steps after {args.warmup_steps} warm-up steps.",
        f"Training FLOPs per sequence (3 x forward matmuls): "
        f"{flops / 1e9:.1f} GFLOP.",
        "Measured tf.matmul rates, GFLOP/s, TF kernel / XLA (best of 10 "
        "each; the MFU denominator is the best of them for the dtype). "
        "MFU = model FLOP/s "
        "of the fastest timed step / that rate: both are best-of-N because "
        "other jobs on a shared machine only slow things down.",
        "",
        "| m x k x n | float32 TF / XLA | bfloat16 TF / XLA |",
        "|---|---|---|",
        *[f"| {m} x {k} x {n} | "
          f"{rates[('float32', False)][(m, k, n)] / 1e9:.0f} / "
          f"{rates[('float32', True)][(m, k, n)] / 1e9:.0f} | "
          f"{rates[('bfloat16', False)][(m, k, n)] / 1e9:.0f} / "
          f"{rates[('bfloat16', True)][(m, k, n)] / 1e9:.0f} |"
          for m, k, n in MATMUL_SHAPES],
        "",
        "| precision | XLA | sequences/s (median) | min-max | vs float32 no XLA "
        "| model GFLOP/s (median) | MFU (best step vs best matmul) |",
        "|---|---|---|---|---|---|---|",
    ]
    for precision, xla, r, achieved, mfu in rows:
        lines.append(
            f"| {precision} | {xla} | {r['median']:.2f} | {r['min']:.2f}-"
            f"{r['max']:.2f} | {r['median'] / base:.2f}x | "
            f"{achieved / 1e9:.0f} | {100 * mfu:.1f}% |")
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
