"""AlbertClassifier: sentence (pair) classification and regression."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import keras
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from albert_tf.models.task_model import OutputProjection, TaskModel
from albert_tf.models.length_buckets import DEFAULT_ROWS_PER_BUCKET

POOLING_MODES = ("pooled", "mean")


def masked_mean(sequence_output: tf.Tensor, input_mask: Optional[tf.Tensor]) -> tf.Tensor:
    """Mean of `sequence_output` [B, T, H] over the positions where `input_mask` [B, T] is 1.

    Summed in float32 (bfloat16 sums of many positions lose digits); a row
    without any real position gives zeros. The result has the input's dtype.

    Example:
    >>> x = tf.constant([[[1.0], [3.0], [100.0]]])
    >>> float(masked_mean(x, tf.constant([[1, 1, 0]]))[0, 0])
    2.0
    """
    x = tf.cast(sequence_output, tf.float32)
    if input_mask is None:
        return tf.cast(tf.reduce_mean(x, axis=1), sequence_output.dtype)
    mask = tf.cast(input_mask, tf.float32)[:, :, None]
    total = tf.reduce_sum(x * mask, axis=1)
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
    return tf.cast(total / count, sequence_output.dtype)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertClassifier(TaskModel):
    """ALBERT with the original run_classifier head.

    `logits = dropout(pooled_output) @ output_weights^T + output_bias`
    (output_weights [num_classes, H]). With ``pooling="mean"`` the head reads
    the masked mean of `sequence_output` over the real tokens ([CLS] and
    [SEP] included) instead of the pooler's tanh dense on [CLS]. Inputs: a dict of id tensors
    (input_ids, input_mask, segment_ids), a tf.string tensor [B], a tuple
    (text, text_pair), or a dict {"text", "text_pair"}. Output: logits
    [B, num_classes], float32 even under mixed precision.

    The default loss (`compile()` without `loss=`) is the original's:
    softmax cross-entropy against integer labels [B], or for
    `num_classes=1` (regression, e.g. STS-B) the squared error against float
    labels, averaged over the global batch.

    Args:
        config: an `AlbertConfig`.
        num_classes: number of labels; 1 means regression.
        preprocessor: an `AlbertTextPreprocessor` for string inputs.
        label_names: optional names of the labels (saved with the model).
        dropout_rate: dropout on the pooled output (the original: 0.1).
        pooling: "pooled" (the original: the pooler's tanh(dense([CLS])))
            or "mean" (`masked_mean` of the sequence output; the pooler is
            then unused and gets no gradient). Saved in task_config.json.
        text_pairs: whether the model was trained on text pairs ([CLS] text
            [SEP] text_pair [SEP]): True, False, or None (not known, e.g. a
            model saved before the key). Saved in task_config.json; the
            exports serve what it says (`albert_tf.export`: a pair model's
            `serving_default` takes `text` and `text_pair`, and its OpenVINO
            text model, which takes one text, is refused).
        **kwargs: passed to `keras.Model`.

    Example:
    >>> import albert_tf
    >>> clf = albert_tf.AlbertClassifier(albert_tf.AlbertConfig.tiny(), num_classes=3)
    >>> clf({"input_ids": tf.constant([[2, 17, 43, 3]])}).shape
    TensorShape([1, 3])
    """

    task_type = "classification"
    inference_rows_per_bucket = DEFAULT_ROWS_PER_BUCKET  # the head reads only the pooled output
    reads_pooled_output_only = True
    init_arguments = ("num_classes", "label_names", "dropout_rate", "pooling", "text_pairs")

    def __init__(self, config: AlbertConfig, num_classes: int, *,
                 preprocessor: Optional[AlbertTextPreprocessor] = None,
                 label_names: Optional[Sequence[str]] = None, dropout_rate: float = 0.1, pooling: str = "pooled",
                 text_pairs: Optional[bool] = None, **kwargs):
        kwargs.setdefault("name", "albert_classifier")
        super().__init__(config, preprocessor=preprocessor, **kwargs)
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be >= 1 (1 = regression), got {num_classes!r}.")
        if label_names is not None and len(label_names) != int(num_classes) and int(num_classes) > 1:
            raise ValueError(f"label_names has {len(label_names)} names but num_classes is {num_classes}: "
                             f"{list(label_names)!r}.")
        if pooling not in POOLING_MODES:
            raise ValueError(f"pooling must be one of {', '.join(POOLING_MODES)}, got {pooling!r}.")
        self.pooling = pooling
        if text_pairs not in (None, True, False):
            raise ValueError(f"text_pairs must be True, False or None (not known), got {text_pairs!r}.")
        self.text_pairs = text_pairs
        if pooling == "mean":
            # Bucketed inference computes only the pooled output; the mean needs the whole sequence.
            self.inference_rows_per_bucket = None
            self.reads_pooled_output_only = False
            # The pooler gets no gradient: as a trainable variable the optimizer built for a resume would
            # hold slots the training run never made (a checkpoint of another layout).
            self.encoder.pooler.trainable = False
        self.num_classes = int(num_classes)
        self.label_names = list(label_names) if label_names is not None else None
        self.dropout_rate = float(dropout_rate)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.head = OutputProjection(self.num_classes, config.initializer_range, name="classifier",
                                     dtype=self.dtype_policy)
        self._build_with_dummy()

    @property
    def is_regression(self) -> bool:
        return self.num_classes == 1

    def _head(self, features, outputs, training):
        if self.pooling == "mean":
            pooled = masked_mean(outputs["sequence_output"], features.get("input_mask"))
        else:
            pooled = outputs["pooled_output"]
        pooled = self.dropout(pooled, training=training)
        return tf.cast(self.head(pooled), tf.float32)

    def loss_terms(self, x, y, y_pred, sample_weight=None):
        logits = tf.cast(y_pred, tf.float32)
        if self.is_regression:
            target = tf.reshape(tf.cast(y, tf.float32), [-1])
            per_example = tf.square(logits[:, 0] - target)
        else:
            labels = tf.reshape(tf.cast(y, tf.int32), [-1])
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        if sample_weight is not None:
            per_example = per_example * tf.reshape(tf.cast(sample_weight, tf.float32), [-1])
        return tf.reduce_sum(per_example), tf.cast(tf.shape(per_example)[0], tf.float32)

    def _task_args(self) -> dict:
        return {"num_classes": self.num_classes, "label_names": self.label_names,
                "dropout_rate": self.dropout_rate, "pooling": self.pooling, "text_pairs": self.text_pairs}

    def head_variable_map(self) -> Dict[str, tf.Variable]:
        # The original run_classifier's variable names.
        return {"output_weights": self.head.output_weights, "output_bias": self.head.output_bias}
