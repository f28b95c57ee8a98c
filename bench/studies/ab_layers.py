"""Interleaved A/B of layer code paths and training levers in one process (issues 18 and 27).

Study (2026-12-02). Question: which layer code path, or training lever, makes a step faster? Answer:
issue 18's layers (2-D dense layers, GELU fused into its matmul, frozen weights for serving) beat the
earlier ones (bench/results/performance_notes.md); the issue-27 levers below are patches here, each tested
to compute the baseline's values (tests/bench/test_ab_layers.py), to be measured on both CPU kinds. Command:
`python -m bench.studies.ab_layers --mode train --batch 8 --reps 7 --steps 20 --variants after,xla_layernorm`.

Builds one ALBERT model and traces one tf.function per variant, each with
the layers' methods patched while it traces; then times the variants in
turn, round after round, so that a shared machine's load hits them alike.
Prints the median seconds per step of each variant and its speed relative
to the first variant (the median of the per-round ratios, with their range).

Variants (issue 18):
- `before`: the layers as they were before issue 18 (Keras `Dense` on 3-D
  tensors, einsum attention with float32 scale and mask).
- `after`: the layers as they are now (the baseline).
- `fused_bias`: `after` with every projection's bias add fused into its
  matmul op (the layers from the first part of issue 18 until the second).
- `fused_output_bias`: `after` with only the FFN's output projection fused.
- `softmax_bf16`: `after` with the softmax in the compute dtype.
- `after_xla`: `after` compiled with XLA (`jit_compile=True`).
- `frozen`: the graph `albert-export` serves: weights as constants, every
  bias add fused (`albert_tf.export.base.freeze_model_call`); inference only.

Training's elementwise work (2026-12-07): `after` runs GELU and residual add +
LayerNorm, forward and backward, as single XLA kernels in float32
(`albert_tf.layers.xla_kernels`); `plain_elementwise` is the plain TensorFlow
ops they replaced. The issue-27 levers below start from `plain_elementwise`.

Training levers (issue 27: the elementwise work outside the matmuls, which
XLA would fuse but whose matmuls run slower than oneDNN's on CPUs):
- `xla_layernorm`: every LayerNorm's call compiled with XLA
  (`tf.function(jit_compile=True)`), the matmuls left to oneDNN;
- `xla_gelu`: the FFN's GELU compiled with XLA (its matmul then runs without
  the fused GELU);
- `xla_lamb`: the LAMB update (clipping and every variable's update) compiled
  with XLA as one function (one replica: the update is applied directly);
- `custom_grad_gelu`: GELU's forward as TensorFlow's (kept fused), its
  backward written out (`gelu_custom_grad`) instead of autodiff's ops;
- `custom_grad_layernorm`: LayerNorm with its backward written out
  (`layer_norm_custom_grad`: dx from x-hat and two means);
- `custom_grads`: both custom gradients; `custom_grads_xla_lamb`: and the LAMB
  update in XLA.

In inference mode every bias gets a small random offset, as trained weights
have (a frozen graph folds zero constants away).

    python -m bench.studies.ab_layers --mode infer --batch 32 --reps 7 --steps 3
    python -m bench.studies.ab_layers --mode train --batch 8 --reps 7 --steps 20 \\
        --variants after,xla_layernorm,xla_gelu,xla_lamb,custom_grads,custom_grads_xla_lamb
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import tempfile
import time
from typing import Dict, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from albert_tf.layers import xla_kernels  # noqa: E402
from albert_tf.layers.attention import AlbertAttention  # noqa: E402
from albert_tf.layers.feed_forward import AlbertFeedForward  # noqa: E402
from albert_tf.layers.heads import MaskedLMHead  # noqa: E402
from albert_tf.optimization import _AlbertAdamBase  # noqa: E402


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


# ------------------------------------------------------------ the levers
_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


@tf.custom_gradient
def gelu_custom_grad(x):
    """GELU (tanh form) with TensorFlow's forward and a written-out backward:
    d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2), t = tanh(c (x + a x^3))."""
    y = tf.nn.gelu(x, approximate=True)

    def grad(dy):
        t = tf.tanh(_GELU_C * (x + _GELU_A * x * x * x))
        slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _GELU_C * (1.0 + 3.0 * _GELU_A * x * x)
        return dy * tf.cast(slope, dy.dtype)
    return y, grad


def layer_norm_custom_grad(x, gamma, beta, epsilon: float):
    """LayerNorm over the last axis with a written-out backward: with x-hat = (x - mean) * r,
    dx = r (g - mean(g) - x-hat mean(g x-hat)), g = dy gamma; dgamma = sum(dy x-hat), dbeta = sum(dy)."""
    @tf.custom_gradient
    def norm(x, gamma, beta):
        mean = tf.reduce_mean(x, axis=-1, keepdims=True)
        centered = x - mean
        rstd = tf.math.rsqrt(tf.reduce_mean(centered * centered, axis=-1, keepdims=True) + epsilon)
        xhat = centered * rstd

        def grad(dy):
            g = dy * gamma
            dx = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                         - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
            width = tf.shape(x)[-1]
            dgamma = tf.reduce_sum(tf.reshape(dy * xhat, [-1, width]), axis=0)
            return dx, dgamma, tf.reduce_sum(tf.reshape(dy, [-1, width]), axis=0)
        return xhat * gamma + beta, grad
    return norm(x, gamma, beta)


_LAYER_NORM_CALL = keras.layers.LayerNormalization.call
_FEED_FORWARD_CALL = AlbertFeedForward.call


def _layer_norm_custom_grad_call(self, inputs):
    if self.axis not in (-1, [-1], (len(inputs.shape) - 1,), [len(inputs.shape) - 1]) or self.rms_scaling:
        raise ValueError(f"custom_grad_layernorm covers LayerNorm over the last axis, not axis={self.axis!r}.")
    x = tf.cast(inputs, tf.float32)
    out = layer_norm_custom_grad(x, tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta), self.epsilon)
    return tf.cast(out, self.compute_dtype)


def _layer_norm_xla_call(self, inputs):
    return tf.function(lambda x: _LAYER_NORM_CALL(self, x), jit_compile=True)(inputs)


def _feed_forward_with_gelu(gelu):
    """AlbertFeedForward.call with the intermediate layer's (tanh) GELU replaced by `gelu`."""
    def call(self, x, training=None):
        if self.hidden_act not in ("gelu", "gelu_new"):
            raise ValueError(f"The GELU levers replace the tanh GELU, not hidden_act={self.hidden_act!r}.")
        saved = self.intermediate.activation
        self.intermediate.activation = gelu
        try:
            return _FEED_FORWARD_CALL(self, x, training=training)
        finally:
            self.intermediate.activation = saved
    return call


def _xla_update_step(self, grads, trainable_variables, learning_rate):
    """The optimizer's update after the all-reduce (clipping, then every variable's update) as one XLA
    function. One replica only: the update is applied directly, not through the strategy."""
    variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
    grads = [tf.convert_to_tensor(g) for g in grads]
    reduced = [g for g, _ in self._all_reduce_sum_gradients(list(zip(grads, variables)))]

    def update(reduced, learning_rate):
        if self.global_clipnorm:
            reduced, _ = tf.clip_by_global_norm(reduced, self.global_clipnorm)
        for g, v in zip(reduced, variables):
            self.update_step(g, v, learning_rate)
        return tf.constant(0)

    tf.function(update, jit_compile=True)(reduced, tf.convert_to_tensor(learning_rate))


_XLA_GELU = tf.function(lambda x: tf.nn.gelu(x, approximate=True), jit_compile=True)


def _never(training):
    return False


# Training's elementwise work as plain TensorFlow ops, as before `albert_tf.layers.xla_kernels`; the
# issue-27 levers below patch those ops, so each starts from this.
_PLAIN = [(xla_kernels, "for_training", _never)]
LEVERS = {
    "plain_elementwise": _PLAIN,
    "xla_layernorm": _PLAIN + [(keras.layers.LayerNormalization, "call", _layer_norm_xla_call)],
    "xla_gelu": _PLAIN + [(AlbertFeedForward, "call", _feed_forward_with_gelu(_XLA_GELU))],
    "xla_lamb": _PLAIN + [(_AlbertAdamBase, "_backend_update_step", _xla_update_step)],
    "custom_grad_gelu": _PLAIN + [(AlbertFeedForward, "call", _feed_forward_with_gelu(gelu_custom_grad))],
    "custom_grad_layernorm": _PLAIN + [(keras.layers.LayerNormalization, "call", _layer_norm_custom_grad_call)],
}
LEVERS["custom_grads"] = LEVERS["custom_grad_gelu"] + LEVERS["custom_grad_layernorm"][1:]
LEVERS["custom_grads_xla_lamb"] = LEVERS["custom_grads"] + LEVERS["xla_lamb"][1:]


VARIANTS = {
    "before": [(AlbertAttention, "call", _attention_before), (AlbertFeedForward, "call", _feed_forward_before),
               (MaskedLMHead, "call", _mlm_head_before)],
    "after": [],
    "fused_bias": [(AlbertAttention, "fuse_projection_bias", True), (AlbertFeedForward, "fuse_output_bias", True)],
    "fused_output_bias": [(AlbertFeedForward, "fuse_output_bias", True)],
    "softmax_bf16": [(AlbertAttention, "softmax_in_float32", False)],
    "after_xla": [],
    "frozen": [],
    **LEVERS,
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


def compare_to_baseline(variants: Dict[str, Sequence[tuple]], seed: int = 0) -> Dict[str, Dict[str, float]]:
    """How far each variant's values are from the baseline's, on a tiny float32 pretrainer.

    Traces the pretraining loss and its gradients without and with each variant's patches, on the same
    weights and batch (dropout off), and applies one LAMB step (clipping at 1.0) to a copy of the weights
    from the baseline's gradients, without and with the patches.

    Args:
        variants: name -> patches (as `VARIANTS`' values).
        seed: of the weights and the batch.

    Returns:
        name -> the largest absolute differences, each over the baseline's largest magnitude (at least 1):
        "loss", "gradients", "weights" (after the LAMB step).
    """
    import albert_tf
    from albert_tf.models.pretrainer import pretraining_loss_terms, pretraining_losses
    from bench.systems import common

    config = albert_tf.AlbertConfig.tiny(hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    keras.utils.set_random_seed(seed)
    model = albert_tf.AlbertPretrainer(config)
    batch = {k: tf.constant(v) for k, v in common.synthetic_pretraining_batch(4, 16, 4, config.vocab_size,
                                                                                seed).items()}
    model(batch)

    def loss_and_grads():
        with tf.GradientTape() as tape:
            loss = pretraining_losses(pretraining_loss_terms(batch, model(batch, training=True)))["loss"]
        return loss, [tf.convert_to_tensor(g) for g in tape.gradient(loss, model.trainable_variables)]

    def lamb_step(grads):
        variables = [tf.Variable(v.numpy(), name=v.path) for v in model.trainable_variables]
        opt = albert_tf.optimization.Lamb(learning_rate=0.01, global_clipnorm=1.0)
        tf.function(lambda: opt.apply_gradients(zip(grads, variables)))()
        return [v.numpy() for v in variables]

    def diff(got, want):
        scale = max([1.0] + [float(tf.reduce_max(tf.abs(w))) for w in want])
        return max(float(tf.reduce_max(tf.abs(g - w))) for g, w in zip(got, want)) / scale

    base_loss, base_grads = tf.function(loss_and_grads)()
    base_weights = lamb_step(base_grads)
    out = {}
    for name, patches in variants.items():
        with patched(patches):
            loss, grads = tf.function(loss_and_grads)()
            weights = lamb_step(base_grads)
        out[name] = {"loss": diff([loss], [base_loss]), "gradients": diff(grads, base_grads),
                     "weights": diff(weights, base_weights)}
    return out


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
    print(f"| variant | median s/step | speed vs {base}: median of per-round ratios (min-max) |\n|---|---|---|")
    for name in names:
        ratios = [b / t for b, t in zip(times[base], times[name])]
        print(f"| {name} | {statistics.median(times[name]):.3f} | {statistics.median(ratios):.3f}x "
              f"({min(ratios):.3f}-{max(ratios):.3f}x) |")


if __name__ == "__main__":
    main()
