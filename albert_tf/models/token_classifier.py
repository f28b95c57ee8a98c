"""AlbertTokenClassifier: one tag per SentencePiece token (NER, chunking, ...)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import keras
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from albert_tf.models.task_model import OutputProjection, TaskModel


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertTokenClassifier(TaskModel):
    """ALBERT with a per-token tagging head.

    `logits = dropout(sequence_output) @ output_weights^T + output_bias`:
    [B, T, num_tags] float32, one row per piece (including [CLS], [SEP] and
    padding; the tagging reader decides which pieces carry a label).

    The default loss is softmax cross-entropy over the tokens that carry a
    label: labels [B, T] int, where a negative label (e.g. -1 for
    continuation pieces, [CLS], [SEP], padding) is ignored, as are positions
    with input_mask 0 when the inputs are a dict of ids. The loss is the sum
    over labelled tokens divided by the global number of labelled tokens (not
    a mean of per-replica means). A sample weight [B] or [B, T] multiplies
    the token losses.

    Args:
        config: an `AlbertConfig`.
        num_tags: number of tags.
        preprocessor: an `AlbertTextPreprocessor` for string inputs.
        tag_names: optional tag names (saved with the model).
        dropout_rate: dropout on the sequence output.
        **kwargs: passed to `keras.Model`.

    Example:
    >>> import albert_tf
    >>> tagger = albert_tf.AlbertTokenClassifier(albert_tf.AlbertConfig.tiny(), num_tags=5)
    >>> tagger({"input_ids": tf.constant([[2, 17, 43, 3]])}).shape
    TensorShape([1, 4, 5])
    """

    task_type = "tagging"
    init_arguments = ("num_tags", "tag_names", "dropout_rate")

    def __init__(self, config: AlbertConfig, num_tags: int, *,
                 preprocessor: Optional[AlbertTextPreprocessor] = None,
                 tag_names: Optional[Sequence[str]] = None, dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "albert_token_classifier")
        super().__init__(config, preprocessor=preprocessor, **kwargs)
        if int(num_tags) < 1:
            raise ValueError(f"num_tags must be >= 1, got {num_tags!r}.")
        if tag_names is not None and len(tag_names) != int(num_tags):
            raise ValueError(f"tag_names has {len(tag_names)} names but num_tags is {num_tags}: "
                             f"{list(tag_names)!r}.")
        self.num_tags = int(num_tags)
        self.tag_names = list(tag_names) if tag_names is not None else None
        self.dropout_rate = float(dropout_rate)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.head = OutputProjection(self.num_tags, config.initializer_range, name="tagging",
                                     dtype=self.dtype_policy)
        self._build_with_dummy()

    def _head(self, features, outputs, training):
        x = self.dropout(outputs["sequence_output"], training=training)
        return tf.cast(self.head(x), tf.float32)

    def loss_terms(self, x, y, y_pred, sample_weight=None):
        labels = tf.cast(y, tf.int32)
        weights = tf.cast(labels >= 0, tf.float32)
        if isinstance(x, dict) and x.get("input_mask") is not None:
            weights *= tf.cast(x["input_mask"], tf.float32)
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(labels, 0), logits=y_pred)
        count = tf.reduce_sum(weights)
        if sample_weight is not None:
            sample_weight = tf.cast(sample_weight, tf.float32)
            if sample_weight.shape.rank == 1:
                sample_weight = sample_weight[:, None]
            weights *= sample_weight
        return tf.reduce_sum(nll * weights), count

    def _task_args(self) -> dict:
        return {"num_tags": self.num_tags, "tag_names": self.tag_names, "dropout_rate": self.dropout_rate}

    def head_variable_map(self) -> Dict[str, tf.Variable]:
        return {"cls/tagging/output_weights": self.head.output_weights,
                "cls/tagging/output_bias": self.head.output_bias}
