"""Factorized ALBERT embeddings: word + position + segment tables of width E."""

import keras
import tensorflow as tf

from albert_tf.layers.fused import apply_layer_norm

LAYER_NORM_EPSILON = 1e-12


def layer_norm(name: str, epsilon: float = LAYER_NORM_EPSILON) -> keras.layers.LayerNormalization:
    """LayerNorm over the last axis, computed in float32 under mixed precision.

    The name always contains "layer_norm" so that optimizers can exclude its
    variables from weight decay by the original's regex.

    Args:
        name: the layer's name (contains "layer_norm").
        epsilon: added to the variance (`AlbertConfig.layer_norm_eps`).

    Returns:
        A `keras.layers.LayerNormalization` with float32 dtype.

    Example:
    >>> norm = layer_norm("layer_norm", 1e-5)
    >>> norm.epsilon, norm.dtype
    (1e-05, 'float32')
    """
    return keras.layers.LayerNormalization(epsilon=epsilon, dtype="float32", name=name)


class AlbertEmbeddings(keras.layers.Layer):
    """Word, segment and absolute position embeddings of width E, then LayerNorm.

    This is the factorized part of ALBERT's embedding: the tables are E wide
    (E << H). The projection to H lives in the encoder, as in the original.
    The layer computes in float32 (lookups, sum and LayerNorm), whatever the
    global mixed-precision policy.

    Args:
        vocab_size: rows V of the word table (also the MLM output matrix).
        embedding_size: width E.
        max_position_embeddings: longest supported sequence.
        type_vocab_size: number of segment ids.
        initializer_range: stddev of the truncated-normal initializer.
        dropout: dropout rate applied after the LayerNorm.
        layer_norm_eps: epsilon of the LayerNorm.

    Example:
    >>> layer = AlbertEmbeddings(100, 16, 64, 2, 0.02, 0.0)
    >>> ids = tf.constant([[2, 10, 3]])
    >>> layer(ids, tf.zeros_like(ids)).shape
    TensorShape([1, 3, 16])
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        max_position_embeddings: int,
        type_vocab_size: int,
        initializer_range: float,
        dropout: float,
        *,
        layer_norm_eps: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.dropout_rate = dropout
        self.layer_norm_eps = layer_norm_eps
        self.layer_norm = layer_norm("layer_norm", layer_norm_eps)
        self.dropout = keras.layers.Dropout(dropout)

    def build(self, input_shape=None):
        # Weights are made here, not in __init__, so that their paths nest
        # under the owning model's name.
        init = keras.initializers.TruncatedNormal(stddev=self.initializer_range)
        vocab_size, embedding_size = self.vocab_size, self.embedding_size
        type_vocab_size, max_position_embeddings = self.type_vocab_size, self.max_position_embeddings
        self.word_embeddings = self.add_weight(
            shape=(vocab_size, embedding_size), initializer=init, name="word_embeddings"
        )
        self.token_type_embeddings = self.add_weight(
            shape=(type_vocab_size, embedding_size), initializer=init, name="token_type_embeddings"
        )
        self.position_embeddings = self.add_weight(
            shape=(max_position_embeddings, embedding_size), initializer=init, name="position_embeddings"
        )
        self.layer_norm.build((None, None, embedding_size))

    def call(self, input_ids, segment_ids, training=None):
        seq_length = input_ids.shape[1]
        if seq_length is not None and seq_length > self.max_position_embeddings:
            raise ValueError(
                f"Sequence length {seq_length} is longer than max_position_embeddings="
                f"{self.max_position_embeddings}."
            )
        dynamic_length = tf.shape(input_ids)[1]
        checks = []
        if seq_length is None:
            checks.append(
                tf.debugging.assert_less_equal(
                    dynamic_length,
                    self.max_position_embeddings,
                    message=f"Sequence length is longer than max_position_embeddings={self.max_position_embeddings}",
                )
            )
        with tf.control_dependencies(checks):
            positions = self.position_embeddings[:dynamic_length]
        x = tf.gather(self.word_embeddings, input_ids)
        x += tf.gather(self.token_type_embeddings, segment_ids)
        x += positions[tf.newaxis]
        x = apply_layer_norm(self.layer_norm, x)
        return self.dropout(x, training=training)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            embedding_size=self.embedding_size,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            initializer_range=self.initializer_range,
            dropout=self.dropout_rate,
            layer_norm_eps=self.layer_norm_eps,
        )
        return config
