"""The self-attention sublayer of an ALBERT block (post-LayerNorm)."""

import math

import keras
import tensorflow as tf

from albert_tf.layers.embeddings import LAYER_NORM_EPSILON, layer_norm
from albert_tf.layers.fused import (add_and_layer_norm, attention_scale_in_queries, dense_2d, flatten_tokens,
                                    unflatten_tokens)
from albert_tf.layers.token_packing import TokenPacking, pack_tokens, unpack_tokens

# The original adds this to the scores of masked keys (modeling.py).
MASK_ADDER = -10000.0


def attention_mask_bias(input_mask: tf.Tensor) -> tf.Tensor:
    """[B, T] 0/1 mask -> additive float32 bias [B, 1, 1, T] (0 or -10000)."""
    mask = tf.cast(input_mask, tf.float32)
    return (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * MASK_ADDER


def tokens_at(x: tf.Tensor, positions: tf.Tensor, packing: TokenPacking = None) -> tf.Tensor:
    """The rows of `x` [B, T, W] (or of the packed tokens [N, W] with `packing`) at `positions` (int [B, Q]), as
    `flatten_tokens` gives tokens: [B*Q, W] ([1, B*Q, W] within `tracing_tokens_in_rank3()`).

    With `packing`, a padding position gives the row of the last real token before it (see `TokenPacking`).

    Example:
    >>> from albert_tf.layers.token_packing import pack_tokens, token_packing
    >>> x = tf.reshape(tf.range(6.0), [2, 3, 1])
    >>> tokens_at(x, tf.constant([[0, 2], [0, 1]])).numpy().ravel().tolist()
    [0.0, 2.0, 3.0, 4.0]
    >>> p = token_packing(tf.constant([[1, 1, 0], [1, 1, 1]]))
    >>> tokens_at(pack_tokens(tf.reshape(x, [6, 1]), p), tf.constant([[0], [2]]), p).numpy().ravel().tolist()
    [0.0, 5.0]
    """
    positions = tf.cast(positions, tf.int32)
    if packing is None:
        return flatten_tokens(tf.gather(x, positions, batch_dims=1))
    # A position's packed row is the unpack index there.
    rows = tf.gather(tf.reshape(packing.unpack_index, [tf.shape(positions)[0], -1]), positions, batch_dims=1)
    return tf.gather(x, tf.reshape(rows, [-1]), axis=x.shape.rank - 2)


class AlbertAttention(keras.layers.Layer):
    """Multi-head self-attention, output projection, residual, LayerNorm.

    Computes `LayerNorm(x + dropout(W_o . softmax(q k^T / sqrt(D) + bias) v))`
    as the original (post-LN). Under mixed precision the projections, the
    scores with their scale and mask, and the context run in the compute
    dtype; softmax, residual and LayerNorm in float32. The projections are
    2-D matmuls with their bias added apart (`albert_tf.layers.fused`), the
    scores one BatchMatMul * scale + mask, which oneDNN fuses.

    Args:
        hidden_size: width H (query/key/value/output kernels are [H, H]).
        num_attention_heads: heads N; H must be divisible by N.
        initializer_range: stddev of the truncated-normal kernel initializer.
        attention_dropout: dropout on the attention probabilities.
        hidden_dropout: dropout on the output projection.
        layer_norm_eps: epsilon of the LayerNorm.

    Example:
    >>> attn = AlbertAttention(32, 2, 0.02, 0.0, 0.0)
    >>> x = tf.random.normal([1, 5, 32])
    >>> attn(x, attention_mask_bias(tf.ones([1, 5]))).shape
    TensorShape([1, 5, 32])
    """

    def __init__(
        self,
        hidden_size: int,
        num_attention_heads: int,
        initializer_range: float,
        attention_dropout: float,
        hidden_dropout: float,
        *,
        layer_norm_eps: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size={hidden_size} is not divisible by num_attention_heads={num_attention_heads}."
            )
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.head_size = hidden_size // num_attention_heads
        self.initializer_range = initializer_range
        self.attention_dropout_rate = attention_dropout
        self.hidden_dropout_rate = hidden_dropout

        def dense(name):
            layer = keras.layers.Dense(
                hidden_size,
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
                name=name,
                dtype=self.dtype_policy,
            )
            return layer

        self.query = dense("query")
        self.key = dense("key")
        self.value = dense("value")
        self.output_dense = dense("output_dense")
        self.attention_dropout = keras.layers.Dropout(attention_dropout)
        self.output_dropout = keras.layers.Dropout(hidden_dropout)
        self.layer_norm_eps = layer_norm_eps
        self.layer_norm = layer_norm("layer_norm", layer_norm_eps)

    # Softmax input dtype; float32 (the original's) unless a test shows the
    # compute dtype is good enough.
    softmax_in_float32 = True
    # Whether the [H, H] projections fuse their bias add into the matmul op.
    # False: a plain MatMul (oneDNN's AMX matmul) and a separate add, 1.04x-1.12x
    # faster inference on AMX, neutral in training (see `dense_2d`).
    fuse_projection_bias = False

    def build(self, x_shape, mask_bias_shape=None):
        for dense in (self.query, self.key, self.value, self.output_dense):
            dense.build((None, self.hidden_size))
        self.layer_norm.build((None, self.hidden_size))

    def _heads(self, dense, x2d, batch_size, packing, scale=None):
        """[B*T or N packed, H] -> [B, N, T, D] projection (kernel and bias times `scale` when given)."""
        y = dense_2d(dense, x2d, fuse_bias=self.fuse_projection_bias, scale=scale)
        if packing is not None:
            y = unpack_tokens(y, packing)
        y = tf.reshape(y, [batch_size, -1, self.num_attention_heads, self.head_size])
        return tf.transpose(y, [0, 2, 1, 3])

    def call(self, x, mask_bias, training=None, packing: TokenPacking = None, query_positions=None):
        """x: [B, T, H], or with `packing` the real tokens [N, H] (`albert_tf.layers.token_packing`).

        `query_positions` (int [B, Q]): only these positions of each row query, every position is a key; the
        output is theirs, [B, Q, H]. For the last block, where the heads read a few positions ([CLS], the
        masked ones): its projections and FFN then run on Q rows a sequence instead of T.
        """
        batch_size = tf.shape(x)[0] if packing is None else tf.shape(mask_bias)[0]
        x2d = flatten_tokens(x)
        scale = 1.0 / math.sqrt(self.head_size)
        scale_in_queries = attention_scale_in_queries()
        selected = query_positions is not None
        queries_x = tokens_at(x, query_positions, packing) if selected else x2d
        q = self._heads(self.query, queries_x, batch_size, None if selected else packing,
                        scale=scale if scale_in_queries else None)
        k = self._heads(self.key, x2d, batch_size, packing)
        v = self._heads(self.value, x2d, batch_size, packing)
        scores = tf.matmul(q, k, transpose_b=True)
        if not scale_in_queries:
            # One BatchMatMul * scale + mask: the remapper's fused pattern. For
            # D = 64 the scale (1/8) is exact in every dtype, and the mask (0 or
            # -10000) is exact enough in bfloat16/float16.
            scores = scores * tf.constant(scale, q.dtype)
        scores = scores + tf.cast(mask_bias, q.dtype)
        if self.softmax_in_float32:
            scores = tf.cast(scores, tf.float32)
        probs = self.attention_dropout(tf.nn.softmax(scores, axis=-1), training=training)
        context = tf.matmul(tf.cast(probs, v.dtype), v)
        context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch_size, -1, self.hidden_size])
        context = flatten_tokens(context)
        if packing is not None and not selected:
            context = pack_tokens(context, packing)
        out = dense_2d(self.output_dense, context, fuse_bias=self.fuse_projection_bias)
        out = self.output_dropout(out, training=training)
        out = add_and_layer_norm(self.layer_norm, out, queries_x, training)
        if selected:
            return tf.reshape(out, [batch_size, -1, self.hidden_size])
        return unflatten_tokens(out, x)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            initializer_range=self.initializer_range,
            attention_dropout=self.attention_dropout_rate,
            hidden_dropout=self.hidden_dropout_rate,
            layer_norm_eps=self.layer_norm_eps,
        )
        return config
