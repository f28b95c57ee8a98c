"""The self-attention sublayer of an ALBERT block (post-LayerNorm)."""

import math

import keras
import tensorflow as tf

from albert_tf.layers.embeddings import LAYER_NORM_EPSILON, layer_norm

# The original adds this to the scores of masked keys (modeling.py).
MASK_ADDER = -10000.0


def attention_mask_bias(input_mask: tf.Tensor) -> tf.Tensor:
    """[B, T] 0/1 mask -> additive float32 bias [B, 1, 1, T] (0 or -10000)."""
    mask = tf.cast(input_mask, tf.float32)
    return (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * MASK_ADDER


class AlbertAttention(keras.layers.Layer):
    """Multi-head self-attention, output projection, residual, LayerNorm.

    Computes `LayerNorm(x + dropout(W_o . softmax(q k^T / sqrt(D) + bias) v))`
    as the original (post-LN). Scores, mask and softmax are float32 under
    mixed precision; the projections run in the compute dtype.

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

    def _split_heads(self, x):
        shape = tf.shape(x)
        return tf.reshape(x, [shape[0], shape[1], self.num_attention_heads, self.head_size])

    def call(self, x, mask_bias, training=None):
        q = self._split_heads(self.query(x))
        k = self._split_heads(self.key(x))
        v = self._split_heads(self.value(x))
        scores = tf.einsum("btnd,bsnd->bnts", q, k)
        # Keras autocasts float arguments to the compute dtype; the bias (0 or
        # -10000) is exact enough in bfloat16/float16 and goes back to float32.
        scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(self.head_size)) + tf.cast(mask_bias, tf.float32)
        probs = tf.nn.softmax(scores, axis=-1)
        probs = self.attention_dropout(probs, training=training)
        context = tf.einsum("bnts,bsnd->btnd", tf.cast(probs, q.dtype), v)
        shape = tf.shape(x)
        context = tf.reshape(context, [shape[0], shape[1], self.hidden_size])
        out = self.output_dropout(self.output_dense(context), training=training)
        return self.layer_norm(tf.cast(out, tf.float32) + tf.cast(x, tf.float32))

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
