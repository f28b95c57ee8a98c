"""Interleaved A/B of layer code paths in one process (issue 18).

Builds one ALBERT model and traces one tf.function per variant, each with
the layers' methods patched while it traces; then times the variants in
turn, round after round, so that a shared machine's load hits them alike.
Prints the median seconds per step of each variant and its speed relative
to the first variant (the median of the per-round ratios).

Variants:
- `before`: the layers as they were before issue 18 (Keras `Dense` on 3-D
  tensors, einsum attention with float32 scale and mask).
- `after`: the layers as they are now.
- `fused_bias`: `after` with every projection's bias add fused into its
  matmul op (the layers from the first part of issue 18 until the second).
- `fused_output_bias`: `after` with only the FFN's output projection fused.
- `softmax_bf16`: `after` with the softmax in the compute dtype.
- `after_xla`: `after` compiled with XLA (`jit_compile=True`).
- `frozen`: the graph `albert-export` serves: weights as constants, every
  bias add fused (`albert_tf.export.base.freeze_model_call`); inference only.

In inference mode every bias gets a small random offset, as trained weights
have (a frozen graph folds zero constants away).

    python -m bench.ab_layers --mode infer --batch 32 --reps 7 --steps 3
    python -m bench.ab_layers --mode train --batch 8 --reps 7 --steps 20
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from albert_tf.layers.attention import AlbertAttention  # noqa: E402
from albert_tf.layers.feed_forward import AlbertFeedForward  # noqa: E402
from albert_tf.layers.heads import MaskedLMHead  # noqa: E402


def _attention_before(self, x, mask_bias, training=None):
    """AlbertAttention.call before issue 18."""
    def split(y):
        shape = tf.shape(y)
        return tf.reshape(y, [shape[0], shape[1], self.num_attention_heads, self.head_size])

    q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
    scores = tf.einsum("btnd,bsnd->bnts", q, k)
    scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(self.head_size)) + tf.cast(mask_bias, tf.float32)
    probs = self.attention_dropout(tf.nn.softmax(scores, axis=-1), training=training)
    context = tf.einsum("bnts,bsnd->btnd", tf.cast(probs, q.dtype), v)
    shape = tf.shape(x)
    context = tf.reshape(context, [shape[0], shape[1], self.hidden_size])
    out = self.output_dropout(self.output_dense(context), training=training)
    return self.layer_norm(tf.cast(out, tf.float32) + tf.cast(x, tf.float32))


def _feed_forward_before(self, x, training=None):
    """AlbertFeedForward.call before issue 18."""
    out = self.output_dropout(self.output_dense(self.intermediate(x)), training=training)
    return self.layer_norm(tf.cast(out, tf.float32) + tf.cast(x, tf.float32))


def _mlm_head_before(self, x, embedding_table):
    """MaskedLMHead.call before issue 18."""
    x = self.layer_norm(self.transform(x))
    table = tf.cast(embedding_table, self.compute_dtype)
    logits = tf.matmul(tf.cast(x, self.compute_dtype), table, transpose_b=True)
    return tf.cast(logits, tf.float32) + tf.cast(self.output_bias, tf.float32)


@contextlib.contextmanager
def patched(patches):
    """Sets (class, attribute, value) triples; restores them on exit."""
    saved = [(cls, name, cls.__dict__[name]) for cls, name, _ in patches]
    try:
        for cls, name, value in patches:
            setattr(cls, name, value)
        yield
    finally:
        for cls, name, value in saved:
            setattr(cls, name, value)


VARIANTS = {
    "before": [(AlbertAttention, "call", _attention_before), (AlbertFeedForward, "call", _feed_forward_before),
               (MaskedLMHead, "call", _mlm_head_before)],
    "after": [],
    "fused_bias": [(AlbertAttention, "fuse_projection_bias", True), (AlbertFeedForward, "fuse_output_bias", True)],
    "fused_output_bias": [(AlbertFeedForward, "fuse_output_bias", True)],
    "softmax_bf16": [(AlbertAttention, "softmax_in_float32", False)],
    "after_xla": [],
    "frozen": [],
}


def _step_factory(mode: str, batch: int, seq: int):
    """A function that returns a fresh step function (traced on first call)."""
    import albert_tf
    from albert_tf import runtime
    from bench.systems import common, ours

    policy = runtime.dtype_policy_name("bfloat16")
    config = albert_tf.AlbertConfig.from_preset("albert_base_v2")
    if mode == "infer":
        from albert_tf.export.base import freeze_model_call

        enc = albert_tf.AlbertEncoder(config, dtype=policy)
        inputs = ours._tf_encoder_batch(batch, seq, config.vocab_size)
        enc(inputs)
        ours.offset_biases(enc)  # as trained: a frozen graph folds zero constants away

        def make(xla=False, frozen=False):
            if frozen:
                graph, outputs = freeze_model_call(enc, {k: tf.TensorSpec([None, None], v.dtype)
                                                         for k, v in inputs.items()})
                flat = tf.nest.flatten(inputs)
                return lambda: tf.nest.pack_sequence_as(outputs, graph(*flat))["pooled_output"].numpy()
            fwd = tf.function(lambda x: enc(x, training=False)["pooled_output"], jit_compile=xla)
            return lambda: fwd(inputs).numpy()
        return make
    from albert_tf.training.state import TrainState
    from albert_tf.training.step import build_train_step, distributed_train_iterator

    strategy = tf.distribute.get_strategy()
    ex = common.synthetic_pretraining_batch(batch, seq, common.PREDICTIONS_PER_SEQ, config.vocab_size)
    state = TrainState.create(config, ours._optimization(batch), "bfloat16", strategy, tempfile.mkdtemp(), 1)
    it = distributed_train_iterator(strategy, lambda ctx: tf.data.Dataset.from_tensors(ex).repeat(), 0,
                                    seq, common.PREDICTIONS_PER_SEQ, batch)

    def make(xla=False, frozen=False):
        if frozen:
            raise ValueError("frozen variants are for --mode infer (a frozen graph cannot train).")
        step_fn = build_train_step(state, strategy, 1, xla)
        return lambda: float(step_fn(it)["mlm_nll_sum"])
    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("train", "infer"), default="infer")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant per round")
    parser.add_argument("--variants", default="before,after", help=f"comma-separated, from {sorted(VARIANTS)}")
    args = parser.parse_args()
    names = args.variants.split(",")
    make = _step_factory(args.mode, args.batch, args.seq)
    runs = {}
    for name in names:
        with patched(VARIANTS[name]):
            runs[name] = make(xla=name.endswith("_xla"), frozen=name.startswith("frozen"))
            runs[name]()  # traces with the patches in place
        runs[name]()  # warm-up
    times = {name: [] for name in names}
    for _ in range(args.reps):
        for name in names:
            start = time.perf_counter()
            for _ in range(args.steps):
                runs[name]()
            times[name].append((time.perf_counter() - start) / args.steps)
    print(f"{args.mode} batch {args.batch} length {args.seq}, mixed bfloat16, {args.reps} rounds x "
          f"{args.steps} steps, 1-min load average {os.getloadavg()[0]:.2f}")
    base = names[0]
    print(f"| variant | median s/step | speed vs {base} (median of per-round ratios) |\n|---|---|---|")
    for name in names:
        ratios = [b / t for b, t in zip(times[base], times[name])]
        print(f"| {name} | {statistics.median(times[name]):.3f} | {statistics.median(ratios):.3f}x |")


if __name__ == "__main__":
    main()
