"""Pretraining heads: masked-LM (tied to the E-wide embeddings) and sentence order."""

import keras
import tensorflow as tf

from albert_tf.layers.activations import get_activation
from albert_tf.layers.embeddings import LAYER_NORM_EPSILON, layer_norm
from albert_tf.layers.fused import apply_layer_norm, dense_2d, flatten_tokens


class MaskedLMHead(keras.layers.Layer):
    """Dense H->E + activation + LayerNorm, then logits against the word table.

    `logits = LayerNorm(act(x W + b)) @ word_embeddings^T + output_bias`: the
    output matrix is the (V, E) input embedding table, passed at call time so
    that it stays owned by the embedding layer.

    Args:
        vocab_size: V (size of the output bias).
        embedding_size: E.
        hidden_act: activation name.
        initializer_range: stddev of the truncated-normal kernel initializer.
        layer_norm_eps: epsilon of the LayerNorm.

    Example:
    >>> head = MaskedLMHead(100, 16, "gelu", 0.02)
    >>> table = tf.random.normal([100, 16])
    >>> head(tf.random.normal([2, 3, 32]), table).shape
    TensorShape([2, 3, 100])
    """

    def __init__(self, vocab_size: int, embedding_size: int, hidden_act: str, initializer_range: float, *,
                 layer_norm_eps: float = LAYER_NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.layer_norm_eps = layer_norm_eps
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.transform = keras.layers.Dense(
            embedding_size,
            activation=get_activation(hidden_act),
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
            name="transform",
            dtype=self.dtype_policy,
        )
        self.layer_norm = layer_norm("layer_norm", layer_norm_eps)

    def build(self, x_shape, embedding_table_shape=None):
        self.transform.build((None, x_shape[-1]))
        self.layer_norm.build((None, self.embedding_size))
        self.output_bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="output_bias")

    def call(self, x, embedding_table):
        # [B, P, H] as one 2-D matrix: MatMul + BiasAdd + GELU fuse (albert_tf.layers.fused).
        h = apply_layer_norm(self.layer_norm, dense_2d(self.transform, flatten_tokens(x)))
        table = tf.cast(embedding_table, self.compute_dtype)
        logits = tf.matmul(tf.cast(h, self.compute_dtype), table, transpose_b=True)
        logits = tf.cast(logits, tf.float32) + tf.cast(self.output_bias, tf.float32)
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [self.vocab_size]], 0))

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,
            hidden_act=self.hidden_act,
            initializer_range=self.initializer_range,
            layer_norm_eps=self.layer_norm_eps,
        )
        return config


class SentenceOrderHead(keras.layers.Layer):
    """2-way classifier on the pooled output: `pooled @ output_weights^T + output_bias`.

    The weights are stored [2, H] as the original's `cls/seq_relationship`.

    Args:
        hidden_size: H.
        initializer_range: stddev of the truncated-normal initializer.

    Example:
    >>> SentenceOrderHead(32, 0.02)(tf.random.normal([4, 32])).shape
    TensorShape([4, 2])
    """

    def __init__(self, hidden_size: int, initializer_range: float, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range

    def build(self, input_shape):
        self.output_weights = self.add_weight(
            shape=(2, self.hidden_size),
            initializer=keras.initializers.TruncatedNormal(stddev=self.initializer_range),
            name="output_weights",
        )
        self.output_bias = self.add_weight(shape=(2,), initializer="zeros", name="output_bias")

    def call(self, pooled):
        logits = tf.matmul(pooled, tf.cast(self.output_weights, pooled.dtype), transpose_b=True)
        return tf.cast(logits, tf.float32) + tf.cast(self.output_bias, tf.float32)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, initializer_range=self.initializer_range)
        return config
