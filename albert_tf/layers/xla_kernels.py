"""Training's elementwise work (GELU, residual add + LayerNorm) as single XLA kernels.

TensorFlow runs GELU and LayerNorm, and autodiff's backward of each, as one
Eigen op per arithmetic step: a GELU forward and backward on the FFN's
[tokens, 3072] activations is about twenty passes over memory, in bfloat16
slower than in float32. Here each forward and each backward is one small
function compiled with XLA (`jit_compile=True`), computing in float32 and
reading and writing the layer's dtype, so that each is one pass; the matmuls
around them stay with oneDNN, which XLA's CPU matmuls do not match. The
backward recomputes the forward's intermediates from the input instead of
keeping them.

Only training uses these (`for_training(training)`): inference, the
SavedModel and the OpenVINO export keep the plain ops, which oneDNN fuses into
the matmul before them. The values are the plain ops' within float32
rounding (`tests/layers/test_xla_kernels.py`); the A/B and profile
behind it are in `bench/results/performance_notes.md` ("Training's
elementwise work as XLA kernels").
"""

from __future__ import annotations

import contextlib
import math
import threading

import tensorflow as tf

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_CUBIC = 0.044715
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

_state = threading.local()


def for_training(training) -> bool:
    """Whether a layer called with `training` takes the XLA kernels (`training` is True, and not `disabled()`)."""
    return training is True and not getattr(_state, "disabled", False)


@contextlib.contextmanager
def disabled():
    """Within this context, layers trace training with the plain TensorFlow ops (for A/B runs and tests)."""
    before = getattr(_state, "disabled", False)
    _state.disabled = True
    try:
        yield
    finally:
        _state.disabled = before


# ------------------------------------------------------------------ GELU
def _gelu_tanh_parts(h):
    """(gelu(h), d gelu / dh) of the tanh form, in float32."""
    t = tf.tanh(_SQRT_2_OVER_PI * (h + _GELU_CUBIC * h * h * h))
    slope = 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_CUBIC * h * h)
    return 0.5 * h * (1.0 + t), slope


def _gelu_erf_parts(h):
    """(gelu(h), d gelu / dh) of the erf form, in float32."""
    cdf = 0.5 * (1.0 + tf.math.erf(h * _INV_SQRT_2))
    return h * cdf, cdf + h * _INV_SQRT_2PI * tf.exp(-0.5 * h * h)


def _gelu_kernels(parts):
    @tf.function(jit_compile=True, autograph=False)
    def gelu_forward(x):
        return tf.cast(parts(tf.cast(x, tf.float32))[0], x.dtype)

    @tf.function(jit_compile=True, autograph=False)
    def gelu_backward(x, dy):
        return tf.cast(tf.cast(dy, tf.float32) * parts(tf.cast(x, tf.float32))[1], dy.dtype)

    @tf.custom_gradient
    def gelu(x):
        return gelu_forward(x), lambda dy: gelu_backward(x, dy)
    return gelu


_GELU = {True: _gelu_kernels(_gelu_tanh_parts), False: _gelu_kernels(_gelu_erf_parts)}


def gelu(x: tf.Tensor, approximate: bool = True) -> tf.Tensor:
    """GELU of `x` (tanh form if `approximate`, else erf), forward and backward each one XLA kernel.

    Args:
        x: a float tensor (float32, bfloat16 or float16; computed in float32).
        approximate: the tanh approximation (ALBERT's "gelu") or the erf form ("gelu_exact").

    Returns:
        A tensor like `x`.

    Example:
    >>> import keras
    >>> x = tf.random.normal([4, 8])
    >>> want = keras.activations.gelu(x, approximate=True)
    >>> float(tf.reduce_max(tf.abs(gelu(x) - want))) < 1e-5
    True
    """
    return _GELU[bool(approximate)](x)


# ------------------------------------------------- residual add + LayerNorm
def _normalized(h, epsilon):
    mean = tf.reduce_mean(h, axis=-1, keepdims=True)
    centered = h - mean
    rstd = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
    return centered * rstd, rstd


@tf.function(jit_compile=True, autograph=False)
def _residual_layer_norm_forward(x, residual, gamma, beta, epsilon):
    xhat, _ = _normalized(tf.cast(x, tf.float32) + tf.cast(residual, tf.float32), epsilon)
    return xhat * gamma + beta


@tf.function(jit_compile=True, autograph=False)
def _residual_layer_norm_backward(x, residual, gamma, epsilon, dy):
    xhat, rstd = _normalized(tf.cast(x, tf.float32) + tf.cast(residual, tf.float32), epsilon)
    dy = tf.cast(dy, tf.float32)
    g = dy * gamma
    dh = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                 - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
    width = tf.shape(dy)[-1]
    dgamma = tf.reduce_sum(tf.reshape(dy * xhat, [-1, width]), axis=0)
    dbeta = tf.reduce_sum(tf.reshape(dy, [-1, width]), axis=0)
    return tf.cast(dh, x.dtype), tf.cast(dh, residual.dtype), dgamma, dbeta


def residual_layer_norm(x: tf.Tensor, residual: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor,
                        epsilon: float) -> tf.Tensor:
    """`LayerNorm(x + residual) * gamma + beta` over the last axis, in float32; forward and backward each
    one XLA kernel.

    Args:
        x: [..., W] sublayer output (any float dtype).
        residual: [..., W] the sublayer's input (any float dtype).
        gamma, beta: [W] float32 scale and offset.
        epsilon: added to the variance.

    Returns:
        float32 [..., W].

    Example:
    >>> import keras
    >>> norm = keras.layers.LayerNormalization(epsilon=1e-12)
    >>> x, r = tf.random.normal([3, 8]), tf.random.normal([3, 8])
    >>> want = norm(x + r)
    >>> got = residual_layer_norm(x, r, norm.gamma, norm.beta, 1e-12)
    >>> float(tf.reduce_max(tf.abs(got - want))) < 1e-5
    True
    """
    epsilon = tf.constant(epsilon, tf.float32)

    @tf.custom_gradient
    def norm(x, residual, gamma, beta):
        def grad(dy):
            return _residual_layer_norm_backward(x, residual, gamma, epsilon, dy)
        return _residual_layer_norm_forward(x, residual, gamma, beta, epsilon), grad
    return norm(x, residual, tf.convert_to_tensor(gamma, tf.float32), tf.convert_to_tensor(beta, tf.float32))
