r"""Peak training memory of ALBERT configs on this CPU, against `albert_tf.planning`.

Study (2026-12-02). Question: Does albert_tf.planning's memory model match TensorFlow's CPU allocator? Answer:
within the bounds tests/albert_tf/test_planning.py checks, for the tiny and small configs in float32 and
bfloat16. Command: `python -m bench.studies.plan_memory --configs=tiny,small --precisions=float32,bfloat16`.

    python -m bench.studies.plan_memory --configs=tiny,small,base --precisions=float32,bfloat16

For each config and micro-batch, one forward + backward pass of the
pretrainer (the gradients of every variable held at the end, as the training
step holds them before the optimizer runs) is measured with TensorFlow's CPU
allocator statistics (`tf.config.experimental.get_memory_info("CPU:0")`):
the peak above what was allocated before the step. Printed next to it: the
planner's figure for the same shape (its total less weights and optimizer
state, which exist before the step). The slope between two
batch sizes is the activation memory per sequence, which the planner's
per-tensor count predicts. `--json` prints one JSON object per line (the
test reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from albert_tf import planning  # noqa: E402  (no TensorFlow import)

# Shapes measured: hidden, layers, heads, intermediate, embedding, vocab.
CONFIGS: Dict[str, Dict[str, int]] = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256,
                 embedding_size=32, vocab_size=1000),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                  embedding_size=128, vocab_size=8000),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 embedding_size=128, vocab_size=30000),
}
# Default micro-batches at sequence length 64. TensorFlow's CPU allocator
# statistics count only allocations of 256 KiB and more (smaller ones go to
# oneDNN's small-size allocator), so the batches make every [B, T, H] and
# [B, N, T, T] tensor at least that large.
BATCHES = {"tiny": (32, 64), "small": (8, 16), "base": (4, 8)}


def measure(name: str, seq: int, batches: Sequence[int], preds: int, precision: str,
            seed: int = 0) -> List[Dict[str, float]]:
    """Peak CPU allocator bytes of one forward + backward pass above the bytes held before it.

    One model serves every batch size.

    Args:
        name: a key of `CONFIGS`.
        seq: sequence length.
        batches: micro-batches to measure.
        preds: masked positions per sequence.
        precision: "float32" or "bfloat16" (Keras mixed policy).
        seed: seed of the weights and the random batches.

    Returns:
        One dict per batch: the measured `peak_bytes`, the planner's
        `activation_bytes` and `planned_bytes` (what the step adds to the
        weights: gradients, weight copies, activations or per-call gradients).
    """
    # The CPU allocator keeps statistics only where oneDNN's allocator serves it; TensorFlow turns oneDNN on by
    # default only on some CPUs (not on AVX2-only ones), so the study asks for it everywhere.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import keras
    import numpy as np
    import tensorflow as tf

    # One op at a time: the peak is then the schedule's, not how many ops a loaded machine happened to overlap.
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import albert_tf
    from albert_tf.models.pretrainer import pretraining_loss_terms

    keras.mixed_precision.set_global_policy("float32" if precision == "float32" else f"mixed_{precision}")
    keras.utils.set_random_seed(seed)
    config = albert_tf.AlbertConfig(max_position_embeddings=max(seq, 64), **CONFIGS[name])
    model = albert_tf.AlbertPretrainer(config)
    keras.mixed_precision.set_global_policy("float32")
    variables = model.trainable_variables
    rng = np.random.default_rng(seed)

    def random_batch(batch: int):
        return {
            "input_ids": tf.constant(rng.integers(5, config.vocab_size, (batch, seq)), tf.int32),
            "input_mask": tf.ones([batch, seq], tf.int32),
            "segment_ids": tf.zeros([batch, seq], tf.int32),
            "masked_lm_positions": tf.constant(rng.integers(0, seq, (batch, preds)), tf.int32),
            "masked_lm_ids": tf.constant(rng.integers(5, config.vocab_size, (batch, preds)), tf.int32),
            "masked_lm_weights": tf.ones([batch, preds], tf.float32),
            "next_sentence_labels": tf.zeros([batch], tf.int32),
        }

    @tf.function
    def step(batch_data):
        with tf.GradientTape() as tape:
            terms = pretraining_loss_terms(batch_data, model(batch_data, training=True))
            loss = terms["mlm_nll_sum"] / terms["mlm_weight_sum"] + terms["sop_nll_sum"] / terms["num_examples"]
        grads = tape.gradient(loss, variables)
        return [tf.convert_to_tensor(g) for g in grads]

    rows = []
    for batch in batches:
        data = random_batch(batch)
        # Static shapes, as the training loop's batches (drop_remainder) have: one trace per
        # batch size. The first run allocates kernels and caches outside the measurement.
        step(data)
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        grads = step(data)
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
        del grads
        plan = planning.memory_plan(config, seq, preds, batch, precision=precision, optimizer="lamb",
                                    gradient_accumulation_steps=1)
        rows.append({"config": name, "seq": seq, "preds": preds, "batch": batch, "precision": precision,
                     "peak_bytes": float(peak), "activation_bytes": plan.activations,
                     "planned_bytes": plan.total - plan.weights - plan.optimizer_state})
    return rows


def main(argv: Sequence[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="tiny,small", help=f"comma-separated, of {sorted(CONFIGS)}")
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--batches", default=None, help=f"comma-separated micro-batches (default: {BATCHES})")
    parser.add_argument("--preds", type=int, default=10)
    parser.add_argument("--precisions", default="float32", help="comma-separated, of float32 and bfloat16")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for precision in args.precisions.split(","):
        if precision not in ("float32", "bfloat16"):
            raise SystemExit(f"--precisions: unknown precision {precision!r}; expected float32 or bfloat16.")
        for name in args.configs.split(","):
            if name not in CONFIGS:
                raise SystemExit(f"--configs: unknown config {name!r}; expected some of {sorted(CONFIGS)}.")
            batches = [int(b) for b in args.batches.split(",")] if args.batches else BATCHES[name]
            _report(measure(name, args.seq, batches, args.preds, precision), args.json)


def _report(rows: List[Dict[str, float]], as_json: bool) -> None:
    for row in rows:
        if as_json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{row['config']} seq {row['seq']} batch {row['batch']} {row['precision']}: measured "
                  f"{row['peak_bytes'] / 2**20:.1f} MiB, planned {row['planned_bytes'] / 2**20:.1f} MiB "
                  f"(activations {row['activation_bytes'] / 2**20:.1f})", flush=True)
    if len(rows) > 1 and not as_json:
        batches = rows[-1]["batch"] - rows[0]["batch"]
        slope = (rows[-1]["peak_bytes"] - rows[0]["peak_bytes"]) / batches
        planned = (rows[-1]["activation_bytes"] - rows[0]["activation_bytes"]) / batches
        print(f"{rows[0]['config']} {rows[0]['precision']}: per sequence measured {slope / 2**20:.2f} MiB, "
              f"planned {planned / 2**20:.2f} MiB (planned / measured {planned / slope:.2f})", flush=True)

if __name__ == "__main__":
    main()
