"""The layers' graphs have the shapes oneDNN fuses, and the fused paths compute the same."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.layers.fused import dense_2d, executed_ops


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _inputs(batch=2, length=6):
    ids = np.array([[2] + [10 + i for i in range(length - 2)] + [3]] * batch, np.int32)
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


def test_encoder_inference_runs_the_fused_ops():
    policy = _fusing_policy()
    if policy is None:
        pytest.skip("this TensorFlow's remapper does not fuse MatMul+BiasAdd+GELU (no oneDNN)")
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
