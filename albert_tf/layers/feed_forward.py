"""The feed-forward sublayer of an ALBERT block (post-LayerNorm)."""

import keras
import tensorflow as tf

from albert_tf.layers.activations import get_activation
from albert_tf.layers.embeddings import LAYER_NORM_EPSILON, layer_norm
from albert_tf.layers.fused import add_and_layer_norm, dense_2d, flatten_tokens, unflatten_tokens


class AlbertFeedForward(keras.layers.Layer):
    """`LayerNorm(x + dropout(W_2 act(W_1 x + b_1) + b_2))`, as the original.

    The dense layers run on the tokens as one 2-D matrix, so that TensorFlow's
    oneDNN remapper fuses MatMul + BiasAdd (+ GELU) (`albert_tf.layers.fused`).

    Args:
        hidden_size: width H.
        intermediate_size: inner width I.
        hidden_act: activation name (see `get_activation`).
        initializer_range: stddev of the truncated-normal kernel initializer.
        hidden_dropout: dropout on the output.
        layer_norm_eps: epsilon of the LayerNorm.

    Example:
    >>> ffn = AlbertFeedForward(32, 64, "gelu", 0.02, 0.0)
    >>> ffn(tf.random.normal([1, 5, 32])).shape
    TensorShape([1, 5, 32])
    """

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        initializer_range: float,
        hidden_dropout: float,
        *,
        layer_norm_eps: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.hidden_dropout_rate = hidden_dropout
        init = keras.initializers.TruncatedNormal(stddev=initializer_range)
        self.intermediate = keras.layers.Dense(
            intermediate_size,
            activation=get_activation(hidden_act),
            kernel_initializer=init,
            name="intermediate",
            dtype=self.dtype_policy,
        )
        self.output_dense = keras.layers.Dense(
            hidden_size, kernel_initializer=init, name="output_dense", dtype=self.dtype_policy
        )
        self.output_dropout = keras.layers.Dropout(hidden_dropout)
        self.layer_norm_eps = layer_norm_eps
        self.layer_norm = layer_norm("layer_norm", layer_norm_eps)

    # Whether the output projection fuses its bias add into the matmul op
    # (see `dense_2d`'s fuse_bias); False measured faster with AMX. The GELU
    # projection always fuses: GELU outside the matmul costs more.
    fuse_output_bias = False

    def build(self, x_shape):
        self.intermediate.build((None, self.hidden_size))
        self.output_dense.build((None, self.intermediate_size))
        self.layer_norm.build((None, self.hidden_size))

    def call(self, x, training=None):
        x2d = flatten_tokens(x)
        hidden = dense_2d(self.intermediate, x2d, training=training)
        out = dense_2d(self.output_dense, hidden, fuse_bias=self.fuse_output_bias)
        out = self.output_dropout(out, training=training)
        out = add_and_layer_norm(self.layer_norm, out, x2d, training)
        return unflatten_tokens(out, x)

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act,
            initializer_range=self.initializer_range,
            hidden_dropout=self.hidden_dropout_rate,
            layer_norm_eps=self.layer_norm_eps,
        )
        return config
