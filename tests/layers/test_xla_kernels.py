"""albert_tf.layers.xla_kernels: training's GELU and residual add + LayerNorm as XLA kernels compute the formulas'
values and derivatives, the layers take them in training only, and the layers' outputs and gradients are those of
the plain ops."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.layers import xla_kernels
from albert_tf.layers.attention import AlbertAttention
from albert_tf.layers.feed_forward import AlbertFeedForward

X = np.array([-4.0, -2.5, -1.0, -0.3, 0.0, 0.2, 0.7, 1.5, 3.0, 5.0])


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _derivative(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


def _value_and_gradient(fn, x, dy):
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = fn(xt)
    return y, tape.gradient(y, xt, output_gradients=tf.constant(dy, y.dtype))


@pytest.mark.parametrize("approximate,reference", [(True, _gelu_tanh), (False, _gelu_erf)])
@pytest.mark.parametrize("dtype,tolerance", [(tf.float32, 2e-6), (tf.bfloat16, 2e-2)])
def test_gelu_and_its_derivative_are_the_formulas(approximate, reference, dtype, tolerance):
    # float64 NumPy references; bfloat16 in and out has 8 bits of mantissa, so about 2**-7 relative.
    dy = np.linspace(-1.0, 1.5, X.size)
    x = tf.cast(X, dtype).numpy()
    y, dx = _value_and_gradient(lambda v: xla_kernels.gelu(v, approximate), x, dy)
    assert y.dtype == dtype and dx.dtype == dtype
    x64 = x.astype(np.float64)
    want_dx = dy * _derivative(reference, x64)
    np.testing.assert_allclose(tf.cast(y, tf.float64).numpy(), reference(x64), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(tf.cast(dx, tf.float64).numpy(), tf.cast(tf.cast(want_dx, dtype), tf.float64),
                               rtol=tolerance, atol=tolerance)


def _layer_norm_reference(x, residual, gamma, beta, epsilon):
    """float64 autodiff of the plain formula: (value, d x, d residual, d gamma, d beta) for output gradient dy."""
    args = [tf.constant(a, tf.float64) for a in (x, residual, gamma, beta)]
    with tf.GradientTape() as tape:
        tape.watch(args)
        h = args[0] + args[1]
        mean = tf.reduce_mean(h, -1, keepdims=True)
        var = tf.reduce_mean(tf.square(h - mean), -1, keepdims=True)
        y = (h - mean) / tf.sqrt(var + epsilon) * args[2] + args[3]
        loss = tf.reduce_sum(y * tf.constant(np.cos(np.arange(y.shape[-1]) + 0.5 * np.arange(y.shape[0])[:, None])))
    return [y.numpy()] + [g.numpy() for g in tape.gradient(loss, args)]


@pytest.mark.parametrize("epsilon", [1e-12, 1e-3])
def test_residual_layer_norm_and_its_gradients_are_the_formulas(epsilon):
    rng = np.random.default_rng(0)
    x, residual = rng.normal(size=(5, 16)), 3.0 + 2.0 * rng.normal(size=(5, 16))
    gamma, beta = 1.0 + 0.3 * rng.normal(size=16), 0.1 * rng.normal(size=16)
    want = _layer_norm_reference(x, residual, gamma, beta, epsilon)
    args = [tf.constant(a, tf.float32) for a in (x, residual, gamma, beta)]
    with tf.GradientTape() as tape:
        tape.watch(args)
        y = xla_kernels.residual_layer_norm(*args, epsilon)
        loss = tf.reduce_sum(y * tf.constant(np.cos(np.arange(16) + 0.5 * np.arange(5)[:, None]), tf.float32))
    got = [y] + tape.gradient(loss, args)
    for name, g, w in zip(("value", "d x", "d residual", "d gamma", "d beta"), got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-4, err_msg=name)


def test_residual_layer_norm_keeps_each_inputs_dtype_in_its_gradient():
    x, residual = tf.cast(tf.random.normal([4, 8]), tf.bfloat16), tf.random.normal([4, 8])
    gamma, beta = tf.ones([8]), tf.zeros([8])
    with tf.GradientTape() as tape:
        tape.watch([x, residual])
        y = xla_kernels.residual_layer_norm(x, residual, gamma, beta, 1e-12)
    dx, dr = tape.gradient(y, [x, residual])
    assert (y.dtype, dx.dtype, dr.dtype) == (tf.float32, tf.bfloat16, tf.float32)


def test_only_training_takes_the_kernels():
    assert xla_kernels.for_training(True)
    for training in (False, None):
        assert not xla_kernels.for_training(training)
    with xla_kernels.disabled():
        assert not xla_kernels.for_training(True)
    assert xla_kernels.for_training(True)


def _function_names(fn, *args):
    """Names of the functions a traced call's graph calls (the XLA kernels are functions of their own)."""
    graph = fn.get_concrete_function(*args).graph
    return " ".join(f.signature.name for f in graph.as_graph_def().library.function)


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_exact"])
def test_a_block_trains_with_the_kernels_and_serves_without_them(hidden_act):
    config = albert_tf.AlbertConfig.tiny(hidden_act=hidden_act, hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
    encoder = albert_tf.AlbertEncoder(config)
    ids = tf.constant([[2, 11, 12, 13, 3, 0]])
    inputs = {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32), "segment_ids": tf.zeros_like(ids)}
    encoder(inputs)

    @tf.function
    def train(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(encoder(x, training=True)["sequence_output"])
        return tape.gradient(loss, encoder.trainable_variables)
    serve = tf.function(lambda x: encoder(x, training=False)["sequence_output"])
    train_names, serve_names = _function_names(train, inputs), _function_names(serve, inputs)
    for kernel in ("_residual_layer_norm_forward", "_residual_layer_norm_backward", "gelu_forward", "gelu_backward"):
        assert kernel in train_names, train_names
    assert "_residual_layer_norm" not in serve_names and "gelu_" not in serve_names, serve_names


def _block_values_and_gradients(layer, inputs, mask_bias=None):
    with tf.GradientTape() as tape:
        args = (inputs,) if mask_bias is None else (inputs, mask_bias)
        out = layer(*args, training=True)
        loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.sin(tf.range(out.shape[-1], dtype=tf.float32)))
    return [out] + tape.gradient(loss, layer.trainable_variables)


@pytest.mark.parametrize("policy,tolerance", [("float32", 1e-5), ("mixed_bfloat16", 0.05)])
@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_exact"])
def test_the_layers_train_as_with_the_plain_ops(policy, tolerance, hidden_act):
    # bfloat16: the kernels compute GELU in float32 where the plain ops round each step to bfloat16, so the two
    # differ by a few bfloat16 roundings (2**-8 relative each) of values of order 1.
    keras.utils.set_random_seed(1)
    width, inner = 16, 32
    ffn = AlbertFeedForward(width, inner, hidden_act, 0.5, 0.0, dtype=policy)
    attention = AlbertAttention(width, 2, 0.5, 0.0, 0.0, dtype=policy)
    x = tf.random.normal([2, 5, width])
    mask_bias = tf.zeros([2, 1, 1, 5])
    for layer, extra in ((ffn, None), (attention, mask_bias)):
        kernels = _block_values_and_gradients(layer, x, extra)
        with xla_kernels.disabled():
            plain = _block_values_and_gradients(layer, x, extra)
        for got, want in zip(kernels, plain):
            got, want = tf.cast(got, tf.float32).numpy(), tf.cast(want, tf.float32).numpy()
            scale = max(1.0, float(np.max(np.abs(want))))
            assert np.max(np.abs(got - want)) <= tolerance * scale, (type(layer).__name__, np.max(np.abs(got - want)))
