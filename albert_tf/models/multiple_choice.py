"""AlbertMultipleChoice: one score per choice (RACE-style)."""

from __future__ import annotations

from typing import Dict, Mapping, Optional

import keras
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.layers.preprocessor import AlbertTextPreprocessor, cut_text, keep_first, keep_last
from albert_tf.models.task_model import OutputProjection, TaskModel, _is_text


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertMultipleChoice(TaskModel):
    """ALBERT with the original RACE head.

    Ids [B, N, T] are reshaped to [B*N, T], encoded, and
    `dropout(pooled) @ output_weights^T + output_bias` (output_weights
    [1, H]) gives one logit per choice, reshaped to [B, N] (float32). The
    default loss is softmax cross-entropy over the N choices against integer
    labels [B].

    String inputs: {"text": context [B], "choices": qa texts [B, N]} (the qa
    text already built by the reader, e.g. the question with "_" replaced by
    the option). Packing as the original: `[CLS] context [SEP] qa [SEP]`, the
    qa keeping its LAST `max_qa_length` pieces, the context cut at its end to
    what is left of max_seq_length.

    Args:
        config: an `AlbertConfig`.
        num_choices: N.
        preprocessor: an `AlbertTextPreprocessor` for string inputs.
        max_qa_length: qa pieces kept (original: 128).
        dropout_rate: dropout on the pooled output (original: the config's
            hidden_dropout_prob; default 0.1 here as the classifier).
        **kwargs: passed to `keras.Model`.

    Example:
    >>> import albert_tf
    >>> mc = albert_tf.AlbertMultipleChoice(albert_tf.AlbertConfig.tiny(), num_choices=4)
    >>> mc({"input_ids": tf.fill([2, 4, 6], 7)}).shape
    TensorShape([2, 4])
    """

    task_type = "multiple_choice"
    reads_pooled_output_only = True  # see TaskModel
    init_arguments = ("num_choices", "max_qa_length", "dropout_rate")

    def __init__(self, config: AlbertConfig, num_choices: int, *,
                 preprocessor: Optional[AlbertTextPreprocessor] = None, max_qa_length: int = 128,
                 dropout_rate: float = 0.1, **kwargs):
        kwargs.setdefault("name", "albert_multiple_choice")
        super().__init__(config, preprocessor=preprocessor, **kwargs)
        if int(num_choices) < 2:
            raise ValueError(f"num_choices must be >= 2, got {num_choices!r}.")
        self.num_choices = int(num_choices)
        self.max_qa_length = int(max_qa_length)
        self.dropout_rate = float(dropout_rate)
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
        self.head = OutputProjection(1, config.initializer_range, name="multiple_choice", dtype=self.dtype_policy)
        self._build_with_dummy()

    def _dummy_ids(self, features):
        return {k: tf.tile(v[:, None], [1, self.num_choices, 1]) for k, v in features.items()}

    def features(self, inputs) -> Dict[str, tf.Tensor]:
        if isinstance(inputs, Mapping) and "choices" in inputs:
            return self._choice_features(inputs["text"], inputs["choices"])
        if _is_text(inputs) or (isinstance(inputs, Mapping) and "text" in inputs):
            raise ValueError("AlbertMultipleChoice takes strings as {'text': context [B], "
                             "'choices': qa texts [B, N]}.")
        return super().features(inputs)

    def _choice_features(self, context, choices) -> Dict[str, tf.Tensor]:
        pre = self._require_preprocessor()
        choices = tf.convert_to_tensor(choices, tf.string)
        batch = tf.shape(choices)[0]
        n = tf.shape(choices)[1]
        qa_length = min(self.max_qa_length, pre.max_seq_length - 3)
        # Only the end of a choice is kept: cut its text from the end (bounded work for huge texts).
        qa = keep_last(pre.tokenize(cut_text(tf.reshape(choices, [-1]), qa_length, keep="last")), qa_length)
        # The context is cut to what any row can keep before it is copied once per choice.
        context_ids = keep_first(pre.tokenize(context, pre.max_seq_length), pre.max_seq_length - 3)
        context_ids = tf.gather(context_ids, tf.repeat(tf.range(batch), n))  # [B*N, None]
        budget = pre.max_seq_length - 3 - tf.cast(qa.row_lengths(), tf.int32)
        packed = pre.pack(keep_first(context_ids, budget), qa)
        return {k: tf.reshape(v, [batch, n, -1]) for k, v in packed.items()}

    def call(self, inputs, training=None):
        features = self.features(inputs)
        ids = features["input_ids"]
        shape = tf.shape(ids)
        flat = {k: tf.reshape(v, [-1, shape[-1]]) for k, v in self.encoder_inputs(features).items()}
        pooled = self.encoder(flat, training=training, pooled_output_only=self.reads_pooled_output_only)["pooled_output"]
        logits = self.head(self.dropout(pooled, training=training))
        return tf.cast(tf.reshape(logits, [shape[0], shape[1]]), tf.float32)

    def loss_terms(self, x, y, y_pred, sample_weight=None):
        labels = tf.reshape(tf.cast(y, tf.int32), [-1])
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=y_pred)
        if sample_weight is not None:
            per_example = per_example * tf.reshape(tf.cast(sample_weight, tf.float32), [-1])
        return tf.reduce_sum(per_example), tf.cast(tf.shape(per_example)[0], tf.float32)

    def _task_args(self) -> dict:
        return {"num_choices": self.num_choices, "max_qa_length": self.max_qa_length,
                "dropout_rate": self.dropout_rate}

    def head_variable_map(self) -> Dict[str, tf.Variable]:
        return {"cls/multiple_choice/output_weights": self.head.output_weights,
                "cls/multiple_choice/output_bias": self.head.output_bias}
