"""Graph shapes that TensorFlow's oneDNN remapper fuses on CPUs.

Grappler's remapper (TensorFlow 2.21, oneDNN builds) fuses only exact
patterns:

- `MatMul + BiasAdd` (an AddV2 of a 1-D bias counts) into `_FusedMatMul`,
  float32 and bfloat16,
  plus `tf.nn.gelu` (tanh or erf form) into the same op. Keras's `Dense`
  on a 3-D input goes through `tf.tensordot` (MatMul, then Reshape, then the
  bias add), and the Reshape between them blocks the fusion.
  `dense_2d` runs a Dense layer's weights on a 2-D input instead.
- `BatchMatMulV2 * scalar + addend` into `_MklFusedBatchMatMulV2` (the
  attention scores with their scale and mask); in our graphs it fires in
  bfloat16, not in float32.

A fused op is not always faster. With variable (not constant) weights,
oneDNN runs `_FusedMatMul` as an inner product on a plain gemm kernel, while
a plain MatMul gets its AMX matmul kernel: on an AMX CPU, bias-only fusion
loses (`python -m bench.studies.matmul_primitives`). The fusion is kept where it
carries GELU, which costs more outside the matmul.

`python -m bench.studies.profile_step --fusions` lists the fused ops a step runs.
"""

import collections
import contextlib
import math
import threading
from typing import Optional

import keras
import tensorflow as tf

from albert_tf.layers import xla_kernels

_tracing = threading.local()


@contextlib.contextmanager
def _tracing_flag(name: str):
    """Sets this thread's tracing flag `name` for the context, then restores it."""
    previous = getattr(_tracing, name, False)
    setattr(_tracing, name, True)
    try:
        yield
    finally:
        setattr(_tracing, name, previous)


@contextlib.contextmanager
def tracing_for_constant_weights():
    """Within this context, `dense_2d` fuses every bias add into its matmul.

    For graphs whose variables become constants afterwards (a frozen serving
    graph, an OpenVINO model): with constant weights oneDNN runs the fused op
    on its AMX kernel with the weights reordered once, the fastest form of
    every dense layer (`python -m bench.studies.matmul_primitives`).
    """
    with _tracing_flag("constant_weights"):
        yield


@contextlib.contextmanager
def tracing_layer_norms_for_openvino():
    """Within this context, `apply_layer_norm` computes in the form OpenVINO fuses into one MVN op.

    Keras computes LayerNormalization as `x * inv + (beta - mean * inv)`,
    which OpenVINO runs as about ten elementwise ops per layer;
    `(x - mean) / sqrt(variance + eps) * gamma + beta`, reduced over a 1-D
    list of axes, is the pattern of OpenVINO's MVN fusion
    (`python -m bench.studies.openvino_layers`).
    """
    with _tracing_flag("mvn_layer_norm"):
        yield


@contextlib.contextmanager
def tracing_attention_scale_in_queries():
    """Within this context, `attention_scale_in_queries()` is True: attention multiplies the query
    projection's kernel and bias by 1/sqrt(head size) instead of the scores.

    For graphs with constant weights (an OpenVINO model): the product is folded into the constants once,
    where OpenVINO otherwise fuses the scores' Multiply into a projection as a post-op, which moves that
    projection off its fastest float32 GEMM (`python -m bench.studies.serving_nodes`).
    """
    with _tracing_flag("scale_in_queries"):
        yield


def attention_scale_in_queries() -> bool:
    """Whether attention is being traced within `tracing_attention_scale_in_queries()`."""
    return getattr(_tracing, "scale_in_queries", False)


@contextlib.contextmanager
def tracing_tokens_in_rank3():
    """Within this context, `flatten_tokens` gives the tokens as one [1, B*T, W] row instead of a [B*T, W]
    matrix, and the dense layers, packing gathers and residual adds work on that rank-3 view.

    For OpenVINO int8 graphs: NNCF puts a quantizer (FakeQuantize) on the input of every dense layer; on a
    2-D [tokens, hidden] input OpenVINO's CPU plugin runs it as a node of its own, on the rank-3 view it fuses
    it into the op before it (`python -m bench.studies.int8_serving --profile_calls 3`).
    """
    with _tracing_flag("rank3_tokens"):
        yield


@contextlib.contextmanager
def tracing_gelu_outside_matmuls():
    """Within this context, `dense_2d` computes the tanh GELU as `x * sigmoid(2c (x + 0.044715 x^3))`,
    c = sqrt(2 / pi), the same function (0.5 (1 + tanh z) = sigmoid(2z)).

    OpenVINO recognises `0.5 x (1 + tanh(...))` as a Gelu op and fuses it into the matmul before it as a
    post-op; on CPUs that infer in float32 (AVX2 only) a matmul with a post-op leaves OpenVINO's fastest GEMM
    (MLAS) for a slower kernel, and the fused projection costs more than the GELU outside it
    (`python -m bench.studies.serving_nodes`). The erf GELU ("gelu_exact") is left as it is.
    """
    with _tracing_flag("gelu_outside_matmuls"):
        yield


def _gelu_tanh_as_sigmoid(x: tf.Tensor) -> tf.Tensor:
    """The tanh GELU in sigmoid form (`tracing_gelu_outside_matmuls`).

    >>> import numpy as np
    >>> x = tf.constant(np.linspace(-6, 6, 49), tf.float32)
    >>> want = keras.activations.gelu(x, approximate=True)
    >>> float(tf.reduce_max(tf.abs(_gelu_tanh_as_sigmoid(x) - want))) < 1e-5
    True
    """
    inner = x + tf.constant(0.044715, x.dtype) * x * x * x
    return x * tf.sigmoid(tf.constant(2.0 * math.sqrt(2.0 / math.pi), x.dtype) * inner)


def _activation(layer: keras.layers.Dense, training=None):
    from albert_tf.layers import activations

    if getattr(_tracing, "gelu_outside_matmuls", False) and layer.activation is activations.gelu_tanh:
        return _gelu_tanh_as_sigmoid
    if xla_kernels.for_training(training) and layer.activation in activations.GELUS:
        approximate = layer.activation is activations.gelu_tanh
        return lambda x: xla_kernels.gelu(x, approximate)
    return layer.activation


def apply_layer_norm(layer: keras.layers.LayerNormalization, x: tf.Tensor) -> tf.Tensor:
    """`layer(x)` for a built last-axis LayerNormalization; in MVN form within `tracing_layer_norms_for_openvino()`.

    Example:
    >>> layer = keras.layers.LayerNormalization(epsilon=1e-12)
    >>> x = tf.random.normal([3, 8])
    >>> want = layer(x)
    >>> with tracing_layer_norms_for_openvino():
    ...     got = apply_layer_norm(layer, x)
    >>> bool(tf.reduce_all(tf.abs(got - want) < 1e-5))
    True
    """
    if not getattr(_tracing, "mvn_layer_norm", False) or layer.rms_scaling or list(layer.axis) != [-1]:
        return layer(x)
    h = tf.cast(x, tf.float32)
    mean = tf.reduce_mean(h, [-1], keepdims=True)  # a list: OpenVINO's MVN takes 1-D axes only
    centered = h - mean
    variance = tf.reduce_mean(tf.pow(centered, 2.0), [-1], keepdims=True)
    out = centered / tf.sqrt(variance + layer.epsilon)
    if layer.scale:
        out = out * tf.cast(layer.gamma.value, tf.float32)
    if layer.center:
        out = out + tf.cast(layer.beta.value, tf.float32)
    return tf.cast(out, layer.compute_dtype)


def add_and_layer_norm(layer: keras.layers.LayerNormalization, x: tf.Tensor, residual: tf.Tensor,
                       training=None) -> tf.Tensor:
    """`layer(x + residual)`, the sum in float32, for a built last-axis LayerNormalization.

    In training (`training=True`) the add and the LayerNorm, and their backward, are each one XLA kernel
    (`albert_tf.layers.xla_kernels`); otherwise `apply_layer_norm`.

    Example:
    >>> layer = keras.layers.LayerNormalization(epsilon=1e-12)
    >>> x, r = tf.random.normal([3, 8]), tf.random.normal([3, 8])
    >>> want = layer(x + r)
    >>> got = add_and_layer_norm(layer, x, r, training=True)
    >>> bool(tf.reduce_all(tf.abs(got - want) < 1e-5))
    True
    """
    if (xla_kernels.for_training(training) and not getattr(_tracing, "mvn_layer_norm", False)
            and not layer.rms_scaling and list(layer.axis) == [-1] and layer.scale and layer.center):
        out = xla_kernels.residual_layer_norm(x, residual, layer.gamma, layer.beta, layer.epsilon)
        return tf.cast(out, layer.compute_dtype)
    return apply_layer_norm(layer, tf.cast(x, tf.float32) + tf.cast(residual, tf.float32))


def dense_2d(layer: keras.layers.Dense, x: tf.Tensor, fuse_bias: bool = True,
             scale: Optional[float] = None, training=None) -> tf.Tensor:
    """`activation(x @ kernel + bias)` of a built `Dense` layer, on a 2-D `x`.

    Computes in the layer's compute dtype, as calling the layer would, but as
    `MatMul + BiasAdd (+ Gelu)`, which the remapper fuses into one oneDNN op.

    Args:
        layer: a built `keras.layers.Dense` with a bias.
        x: [N, in] tensor (or [1, N, in] within `tracing_tokens_in_rank3()`).
        fuse_bias: False keeps the bias add out of the matmul op (for layers
            without an activation): with variable weights, TensorFlow runs a
            fused MatMul + BiasAdd as a oneDNN inner product on a plain gemm
            kernel, while a plain MatMul gets oneDNN's AMX matmul
            (`bench/results/performance_notes.md`). Ignored (fused) within
            `tracing_for_constant_weights()`.
        scale: multiplies the kernel and the bias (for constant weights: folded into them once).
        training: True: a GELU activation runs as one XLA kernel each way (`albert_tf.layers.xla_kernels`),
            outside the matmul, which in training TensorFlow does not fuse with it anyway.

    Returns:
        [N, units] tensor in the layer's compute dtype.

    Example:
    >>> layer = keras.layers.Dense(3, activation="tanh")
    >>> layer.build((None, 4))
    >>> x = tf.random.normal([2, 4])
    >>> bool(tf.reduce_all(tf.abs(dense_2d(layer, x) - layer(x)) < 1e-6))
    True
    """
    dtype = layer.compute_dtype
    kernel, bias = tf.cast(layer.kernel, dtype), tf.cast(layer.bias, dtype)
    if scale is not None:
        kernel, bias = kernel * tf.constant(scale, dtype), bias * tf.constant(scale, dtype)
    activation = _activation(layer, training)
    y = tf.matmul(tf.cast(x, dtype), kernel)
    if fuse_bias or getattr(_tracing, "constant_weights", False) or y.shape.rank == 3:
        return activation(tf.nn.bias_add(y, bias))
    # A rank-3 view: the remapper fuses only a 2-D MatMul's direct bias add.
    y3 = tf.reshape(y, [1, -1, y.shape[-1]]) + bias
    return activation(tf.reshape(y3, [-1, y.shape[-1]]))


def flatten_tokens(x: tf.Tensor) -> tf.Tensor:
    """[B, T, W] -> [B*T, W] (the static last dimension kept); [1, B*T, W] within `tracing_tokens_in_rank3()`."""
    if getattr(_tracing, "rank3_tokens", False):
        return tf.reshape(x, [1, -1, x.shape[-1]])
    return tf.reshape(x, [-1, x.shape[-1]])


def unflatten_tokens(x: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """[B*T, W] -> [B, T, W] with B and T taken from `like` (a 2-D `like`: x as it is)."""
    if like.shape.rank == 2:
        return x
    shape = tf.shape(like)
    return tf.reshape(x, [shape[0], shape[1], x.shape[-1]])


# Partition-graph nodes that are bookkeeping, not work.
_NOT_WORK = {"Const", "_Arg", "_Retval", "ReadVariableOp", "Identity", "NoOp", "_Recv", "_Send",
             "AssignVariableOp", "AssignAddVariableOp", "VarHandleOp", "_HostRecv", "_HostSend"}


def executed_ops(run) -> collections.Counter:
    """Node counts of the graphs TensorFlow executes when `run()` first runs.

    The graphs are the partition graphs of the run metadata: after grappler
    (the oneDNN remapper) and the oneDNN layout pass, so fused ops appear as
    e.g. "_MklNativeFusedMatMul[BiasAdd,GeluApproximate]" (op type, then its
    `fused_ops`). `run` must call tf.functions not yet run (graphs are
    collected when a function is instantiated).

    Example:
    >>> f = tf.function(lambda x: x * 2.0)
    >>> executed_ops(lambda: f(tf.ones([2])))
    Counter({'Mul': 1})
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_graph_collection()
    try:
        run()
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_graph_collection()
    census: collections.Counter = collections.Counter()
    for function_graphs in metadata.function_graphs:
        for graph in function_graphs.partition_graphs:
            for node in graph.node:
                if node.op in _NOT_WORK:
                    continue
                fused = node.attr["fused_ops"].list.s if "fused_ops" in node.attr else None
                key = node.op + ("[" + ",".join(s.decode() for s in fused) + "]" if fused is not None else "")
                census[key] += 1
    return census
