"""bench.studies.ab_layers: every training lever computes the baseline's values (float32, tiny config), and the
comparison catches a lever that does not (wrong backwards, a wrong update)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from bench.studies import ab_layers as ab

# float32: XLA and the written-out backwards reorder sums (measured: at most 1.2e-7 of the largest magnitude).
TOLERANCE = 1e-5
# The combinations (custom_grads, custom_grads_xla_lamb) are these patches concatenated.
# plain_elementwise: the ops albert_tf.layers.xla_kernels replaced, against the kernels (the baseline).
LEVERS = ("plain_elementwise", "xla_layernorm", "xla_gelu", "xla_lamb", "custom_grad_gelu", "custom_grad_layernorm")


@tf.custom_gradient
def _gelu_wrong_backward(x):
    """GELU with the tanh term's factor 0.5 dropped from its backward."""
    def grad(dy):
        t = tf.tanh(ab._GELU_C * (x + ab._GELU_A * x * x * x))
        return dy * (0.5 * (1.0 + t) + x * (1.0 - t * t) * ab._GELU_C * (1.0 + 3.0 * ab._GELU_A * x * x))
    return tf.nn.gelu(x, approximate=True), grad


def _layer_norm_wrong_backward(self, inputs):
    """LayerNorm whose backward leaves out the mean of the incoming gradient."""
    @tf.custom_gradient
    def norm(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        rstd = tf.math.rsqrt(variance + self.epsilon)
        xhat = (x - mean) * rstd

        def grad(dy):
            g = dy * gamma
            width = tf.shape(x)[-1]
            return (rstd * (g - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True)),
                    tf.reduce_sum(tf.reshape(dy * xhat, [-1, width]), 0), tf.reduce_sum(tf.reshape(dy, [-1, width]), 0))
        return xhat * gamma + beta, grad
    return norm(tf.cast(inputs, tf.float32), tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta))


_UPDATE = ab._AlbertAdamBase._backend_update_step


def _update_twice(self, grads, trainable_variables, learning_rate):
    """The update at twice the learning rate."""
    return _UPDATE(self, grads, trainable_variables, 2.0 * learning_rate)


WRONG = {
    "wrong_gelu_backward": [(ab.AlbertFeedForward, "call", ab._feed_forward_with_gelu(_gelu_wrong_backward))],
    "wrong_layernorm_backward": ab._PLAIN + [(ab.keras.layers.LayerNormalization, "call", _layer_norm_wrong_backward)],
    "wrong_update": [(ab._AlbertAdamBase, "_backend_update_step", _update_twice)],
}


@pytest.fixture(scope="module")
def diffs():
    return ab.compare_to_baseline({**{name: ab.VARIANTS[name] for name in LEVERS}, **WRONG})


@pytest.mark.parametrize("lever", LEVERS)
def test_each_lever_computes_the_baselines_loss_gradients_and_update(diffs, lever):
    assert max(diffs[lever].values()) <= TOLERANCE, diffs[lever]
    assert lever in ab.VARIANTS


@pytest.mark.parametrize("wrong,field", [("wrong_gelu_backward", "gradients"),
                                         ("wrong_layernorm_backward", "gradients"), ("wrong_update", "weights")])
def test_the_comparison_catches_a_wrong_lever(diffs, wrong, field):
    assert diffs[wrong][field] > 10 * TOLERANCE, diffs[wrong]  # the levers: at most 0.012 x TOLERANCE
    assert diffs[wrong]["loss"] <= TOLERANCE  # each wrong lever changes only what it claims to change


def test_gelu_backward_equals_the_derivative_by_hand():
    # Hand-worked: d/dx of 0.5 x (1 + tanh(c (x + a x^3))) by central differences in float64.
    x = np.array([-3.0, -0.5, 0.0, 0.7, 2.5])
    f = lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))  # noqa: E731
    want = (f(x + 1e-6) - f(x - 1e-6)) / 2e-6
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = ab.gelu_custom_grad(xt)
    np.testing.assert_allclose(tape.gradient(y, xt).numpy(), want, atol=1e-5)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = _gelu_wrong_backward(xt)
    assert np.max(np.abs(tape.gradient(y, xt).numpy() - want)) > 0.01
