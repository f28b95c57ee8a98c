"""The layers' graphs have the shapes oneDNN fuses, and the fused paths compute the same."""

import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.layers.fused import dense_2d, executed_ops


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _inputs(batch=2, length=6):
    """Rows of other pieces (and the second row's last two masked): another row's answer is another answer."""
    ids = np.array([[2] + [10 + (7 * row + 3 * i) % 80 for i in range(length - 2)] + [3] for row in range(batch)],
                   np.int32)
    mask = np.ones_like(ids)
    mask[1, -2:] = 0
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask), "segment_ids": tf.zeros_like(ids)}


def _fusing_policy():
    """The dtype policy in which this TensorFlow fuses MatMul + BiasAdd + GELU
    (oneDNN builds: bfloat16 where the CPU supports it, else float32), or None."""
    for policy, dtype in (("mixed_bfloat16", tf.bfloat16), ("float32", tf.float32)):
        w = tf.cast(tf.random.normal([8, 8]), dtype)
        f = tf.function(lambda x: tf.nn.gelu(tf.nn.bias_add(tf.matmul(x, w), tf.ones([8], dtype)), approximate=True))
        if any("Gelu" in op for op in executed_ops(lambda: f(tf.ones([4, 8], dtype)))):
            return policy
    return None


def test_dense_2d_is_the_dense_formula():
    layer = keras.layers.Dense(5, activation=lambda x: keras.activations.gelu(x, approximate=True))
    layer.build((None, 4))
    layer.bias.assign(np.linspace(-1, 1, 5).astype(np.float32))
    x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    w, b = layer.kernel.numpy(), layer.bias.numpy()
    np.testing.assert_allclose(dense_2d(layer, x), _gelu_tanh(x @ w + b), atol=1e-5)
    np.testing.assert_allclose(dense_2d(layer, x, fuse_bias=False), _gelu_tanh(x @ w + b), atol=1e-5)


def _child_environment(**extra):
    """This environment for a nested pytest, without the outer run's own variables (its skip log, its CPU-time
    files, pytest-xdist's worker names)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALBERT_TF_", "PYTEST_"))}
    return dict(env, **extra)


def test_encoder_inference_runs_the_fused_ops():
    policy = _fusing_policy()
    if policy is None and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "1":
        # TensorFlow leaves oneDNN off by default on CPUs without AVX-512 VNNI/BF16 or AMX (AVX2 only): the
        # same test in a process that turns it on, as a user of such a CPU can.
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               f"{__file__}::test_encoder_inference_runs_the_fused_ops"],
                              env=_child_environment(TF_ENABLE_ONEDNN_OPTS="1"), capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        return
    assert policy is not None, "oneDNN is on (TF_ENABLE_ONEDNN_OPTS=1) and still no MatMul+BiasAdd+GELU fusion"
    cfg = albert_tf.AlbertConfig.tiny()
    enc = albert_tf.AlbertEncoder(cfg, dtype=policy)
    inputs = _inputs()
    fwd = tf.function(lambda x: enc(x, training=False)["pooled_output"])
    ops = executed_ops(lambda: fwd(inputs))
    blocks = cfg.num_hidden_layers * cfg.inner_group_num
    fused_matmuls = {k: n for k, n in ops.items() if "FusedMatMul" in k}
    # FFN in (with its GELU) per block, and the pooler; q, k, v, the attention
    # output and FFN out are plain matmuls with the bias added apart.
    assert sum(fused_matmuls.values()) == blocks + 1, ops
    assert sum(n for k, n in fused_matmuls.items() if k.endswith("GeluApproximate]")) == blocks, ops
    assert sum(n for k, n in ops.items() if k.endswith("MatMul")) >= 5 * blocks, ops
    # No GELU left outside a matmul; the pooler's tanh is fused too.
    assert ops["Tanh"] == 0 and ops["Erf"] == 0, ops
    if policy == "mixed_bfloat16":
        # Scores, scale and mask in one op (float32 graphs keep the Mul apart).
        assert sum(n for k, n in ops.items() if k.startswith("_MklFusedBatchMatMulV2")) == blocks, ops


def test_tracing_for_constant_weights_fuses_every_bias():
    from albert_tf.layers.fused import tracing_for_constant_weights

    cfg = albert_tf.AlbertConfig.tiny()
    enc = albert_tf.AlbertEncoder(cfg)
    inputs = _inputs()
    enc(inputs)

    def bias_adds():
        graph = tf.function(lambda x: enc(x, training=False)["pooled_output"]).get_concrete_function(inputs).graph
        return sum(op.type == "BiasAdd" for op in graph.get_operations())

    blocks = cfg.num_hidden_layers * cfg.inner_group_num
    with tracing_for_constant_weights():
        fused = bias_adds()
    # Six dense layers per block, plus the embedding projection and the pooler (Keras Dense); outside the
    # context only FFN in (with its GELU) keeps its BiasAdd in the blocks.
    assert fused == 6 * blocks + 2 and bias_adds() == blocks + 2, (fused, bias_adds())


# bf16: fused and unfused round differently (~1e-2 of outputs of order 1); float32 only by summation order.
FROZEN_TOLERANCE = {"mixed_bfloat16": 0.05, "float32": 1e-5}


@pytest.mark.parametrize("policy", list(FROZEN_TOLERANCE))
def test_frozen_model_call_equals_the_model_and_fuses_every_dense_layer(policy):
    """In each policy (fused where this TensorFlow fuses it), and another row's answer is far outside the bound."""
    from albert_tf.export.base import freeze_model_call

    cfg = albert_tf.AlbertConfig.tiny()
    enc = albert_tf.AlbertEncoder(cfg, dtype=policy)
    inputs = _inputs()
    enc(inputs)
    rng = np.random.default_rng(0)
    for weight in enc.weights:  # non-zero biases: zero constants would be folded away
        if len(weight.shape) == 1:
            weight.assign(weight + rng.normal(0, 0.1, weight.shape).astype(np.float32))
    frozen, outputs = freeze_model_call(enc, {k: tf.TensorSpec([None, None], v.dtype) for k, v in inputs.items()})
    flat = tf.nest.flatten(inputs)
    got = np.float32(tf.nest.pack_sequence_as(outputs, frozen(*flat))["sequence_output"])
    want = np.float32(enc(inputs, training=False)["sequence_output"])
    tolerance = FROZEN_TOLERANCE[policy]
    np.testing.assert_allclose(got, want, atol=tolerance)
    # The companion: the rows' answers differ by ~1 (measured 1.1 in bf16), 20x the bf16 bound.
    assert np.max(np.abs(got - want[::-1])) > 10 * tolerance
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(got, want[::-1], atol=tolerance)
    assert not frozen.variables
    if _fusing_policy() == policy:
        frozen_again, _ = freeze_model_call(enc, {k: tf.TensorSpec([None, None], v.dtype) for k, v in inputs.items()})
        ops = executed_ops(lambda: frozen_again(*flat))
        blocks = cfg.num_hidden_layers * cfg.inner_group_num
        assert sum(n for k, n in ops.items() if "FusedMatMul" in k) >= 6 * blocks, ops
