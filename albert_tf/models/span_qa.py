"""AlbertSpanQA: extractive question answering (SQuAD v1.1 and v2.0 heads)."""

from __future__ import annotations

from typing import Dict, Optional

import keras
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.layers.embeddings import layer_norm
from albert_tf.layers.preprocessor import SEP_ID, AlbertTextPreprocessor, keep_first
from albert_tf.models.task_model import OutputProjection, TaskModel

# The original v2 head's masking constant.
_MASK_VALUE = 1e30


def _labels(y) -> Dict[str, tf.Tensor]:
    if isinstance(y, dict):
        return y
    if isinstance(y, (tuple, list)) and len(y) in (2, 3):
        return dict(zip(("start_positions", "end_positions", "is_impossible"), y))
    raise ValueError("AlbertSpanQA labels must be a dict with 'start_positions', 'end_positions' "
                     f"(and 'is_impossible' for version_2) or a tuple of them; got {type(y).__name__}.")


def _position_nll(log_probs: tf.Tensor, positions) -> tf.Tensor:
    positions = tf.reshape(tf.cast(positions, tf.int32), [-1])
    return -tf.gather(log_probs, positions, batch_dims=1)


@keras.saving.register_keras_serializable(package="albert_tf")
class AlbertSpanQA(TaskModel):
    """ALBERT for span extraction, with the original's SQuAD heads.

    version_2=False (SQuAD v1.1, `run_squad_v1`): one dense layer H -> 2 over
    every token (`cls/squad/output_weights` [2, H]) gives `start_logits` and
    `end_logits` [B, T]. Unlike the original, padding positions are masked
    (-1e30) so that results do not depend on how far a batch is padded.

    version_2=True (SQuAD v2.0, the original's XLNet-style head):
    - start logits: dense H -> 1, with `p_mask` positions (the question, the
      [SEP]s, padding) set to -1e30;
    - end logits, conditioned on a start: dense 2H -> H (tanh) on
      concat(h_t, h_start), LayerNorm, dense H -> 1, masked alike. When the
      gold `start_positions` are given (training, and `fit`/`evaluate`, which
      take them from the labels) the end logits are conditioned on them;
      otherwise on each of the `start_n_top` best starts (beam of the
      original): `end_logits` is the row for the best start, and
      `start_top_log_probs`/`start_top_index` [B, k] and
      `end_top_log_probs`/`end_top_index` [B, k, end_n_top] are returned too;
    - `cls_logits` [B] (answerability; larger = more likely no answer):
      concat(sum_t softmax(start)_t h_t, h_[CLS]) -> dense 2H -> H (tanh) ->
      dropout -> dense H -> 1 without bias.
    `p_mask` is taken from the inputs when given (1 = not an answer token),
    else derived: only [CLS] and the second segment's non-[SEP] tokens may
    answer.

    Inputs: a dict of ids (input_ids, input_mask, segment_ids, optional
    p_mask), or strings as (question, context) / {"text": question,
    "text_pair": context}: the question is cut to `max_query_length` pieces
    and the context to what is left of max_seq_length (no sliding window:
    the SQuAD reader makes windows). Labels for `fit`: a dict with
    `start_positions`, `end_positions` [B] (and `is_impossible` [B] for v2).
    Loss (original): (CE(start) + CE(end)) / 2, plus 0.5 * sigmoid
    cross-entropy of cls_logits against is_impossible for v2.

    Args:
        config: an `AlbertConfig`.
        preprocessor: an `AlbertTextPreprocessor` for string inputs.
        version_2: use the v2 head.
        max_query_length: question pieces kept for string inputs (original: 64).
        start_n_top: starts kept at inference (v2; original: 5).
        end_n_top: ends kept per start at inference (v2; original: 5).
        dropout_rate: dropout of the v2 answerability head (default: the
            config's hidden_dropout_prob, as the original).
        doc_stride: the reader's window stride, kept (task_config.json) so
            that serving cuts long contexts into the training windows.
        null_score_diff_threshold: v2: the null odds above which the answer
            is "" (chosen on dev by fine-tuning), kept for serving.
        max_answer_length: the longest answer in pieces fine-tuning decoded
            with, kept (task_config.json) so that the export serves the same.
        n_best_size: v1: the starts and ends of each window fine-tuning
            decoded from (the top n of each), kept (task_config.json) so that
            the export picks among the same spans (`albert_tf.export.span_qa.
            best_spans`); v2 decodes from its beam (start_n_top x end_n_top).
        **kwargs: passed to `keras.Model`.

    Example:
    >>> import albert_tf
    >>> qa = albert_tf.AlbertSpanQA(albert_tf.AlbertConfig.tiny())
    >>> out = qa({"input_ids": tf.constant([[2, 17, 3, 43, 44, 3]])})
    >>> out["start_logits"].shape, out["end_logits"].shape
    (TensorShape([1, 6]), TensorShape([1, 6]))
    """

    task_type = "span_qa"
    init_arguments = ("version_2", "max_query_length", "start_n_top", "end_n_top", "dropout_rate", "doc_stride",
                      "null_score_diff_threshold", "max_answer_length", "n_best_size")

    def __init__(self, config: AlbertConfig, *, preprocessor: Optional[AlbertTextPreprocessor] = None,
                 version_2: bool = False, max_query_length: int = 64, start_n_top: int = 5, end_n_top: int = 5,
                 dropout_rate: Optional[float] = None, doc_stride: int = 128,
                 null_score_diff_threshold: float = 0.0, max_answer_length: int = 30, n_best_size: int = 20,
                 **kwargs):
        kwargs.setdefault("name", "albert_span_qa")
        super().__init__(config, preprocessor=preprocessor, **kwargs)
        self.version_2 = bool(version_2)
        self.max_query_length = int(max_query_length)
        self.start_n_top = int(start_n_top)
        self.end_n_top = int(end_n_top)
        self.dropout_rate = float(config.hidden_dropout_prob if dropout_rate is None else dropout_rate)
        if int(doc_stride) < 1:
            raise ValueError(f"doc_stride must be >= 1, got {doc_stride!r}.")
        self.doc_stride = int(doc_stride)
        self.null_score_diff_threshold = float(null_score_diff_threshold)
        if int(max_answer_length) < 1:
            raise ValueError(f"max_answer_length must be >= 1, got {max_answer_length!r}.")
        self.max_answer_length = int(max_answer_length)
        if int(n_best_size) < 1:
            raise ValueError(f"n_best_size must be >= 1, got {n_best_size!r}.")
        self.n_best_size = int(n_best_size)
        init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        policy = self.dtype_policy
        hidden = config.hidden_size
        if not self.version_2:
            self.span_head = OutputProjection(2, config.initializer_range, name="squad", dtype=policy)
        else:
            self.start_dense = keras.layers.Dense(1, kernel_initializer=init, name="start_logits", dtype=policy)
            self.end_dense_0 = keras.layers.Dense(hidden, activation="tanh", kernel_initializer=init,
                                                  name="end_logits_dense_0", dtype=policy)
            self.end_layer_norm = layer_norm("end_logits_layer_norm")
            self.end_dense_1 = keras.layers.Dense(1, kernel_initializer=init, name="end_logits_dense_1",
                                                  dtype=policy)
            self.answer_dense_0 = keras.layers.Dense(hidden, activation="tanh", kernel_initializer=init,
                                                     name="answer_class_dense_0", dtype=policy)
            self.answer_dropout = keras.layers.Dropout(self.dropout_rate, dtype=policy)
            self.answer_dense_1 = keras.layers.Dense(1, use_bias=False, kernel_initializer=init,
                                                     name="answer_class_dense_1", dtype=policy)
        self._build_with_dummy()

    # ------------------------------------------------------------- inputs
    def _text_features(self, text, text_pair=None):
        pre = self._require_preprocessor()
        if text_pair is None:
            raise ValueError("AlbertSpanQA needs (question, context) pairs of strings.")
        question = keep_first(pre.tokenize(text, self.max_query_length), self.max_query_length)
        question = keep_first(question, pre.max_seq_length - 3)
        context = pre.tokenize(text_pair, pre.max_seq_length)
        budget = pre.max_seq_length - 3 - tf.cast(question.row_lengths(), tf.int32)
        return pre.pack(question, keep_first(context, budget))

    @staticmethod
    def answer_mask(features) -> tf.Tensor:
        """float32 [B, T]: 1 where a token cannot start or end an answer."""
        if "p_mask" in features:
            return tf.cast(features["p_mask"], tf.float32)
        ids = tf.cast(features["input_ids"], tf.int32)
        mask = features.get("input_mask")
        mask = tf.ones_like(ids) if mask is None else tf.cast(mask, tf.int32)
        segments = features.get("segment_ids")
        segments = tf.zeros_like(ids) if segments is None else tf.cast(segments, tf.int32)
        allowed = (segments == 1) & (mask == 1) & (ids != SEP_ID)
        is_cls = tf.equal(tf.range(tf.shape(ids)[1]), 0)[None, :]
        return 1.0 - tf.cast(allowed | is_cls, tf.float32)

    # --------------------------------------------------------------- heads
    def _head(self, features, outputs, training):
        h = outputs["sequence_output"]
        if not self.version_2:
            logits = tf.cast(self.span_head(h), tf.float32)
            mask = features.get("input_mask")
            if mask is not None:
                pad = 1.0 - tf.cast(mask, tf.float32)
                logits = logits * (1.0 - pad[..., None]) - _MASK_VALUE * pad[..., None]
            return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}
        return self._v2_head(features, h, training)

    def _end_logits(self, h, start_features, p_mask):
        """h [B, T, H], start_features broadcastable to it -> masked logits [..., T]."""
        shape = tf.concat([tf.broadcast_dynamic_shape(tf.shape(h)[:-1], tf.shape(start_features)[:-1]),
                           tf.shape(h)[-1:]], axis=0)
        h = tf.broadcast_to(h, shape)
        x = self.end_dense_0(tf.concat([h, tf.broadcast_to(start_features, shape)], axis=-1))
        x = self.end_dense_1(self.end_layer_norm(x))
        logits = tf.cast(tf.squeeze(x, -1), tf.float32)
        return logits * (1.0 - p_mask) - _MASK_VALUE * p_mask

    def _v2_head(self, features, h, training):
        p_mask = self.answer_mask(features)
        start_logits = tf.cast(tf.squeeze(self.start_dense(h), -1), tf.float32)
        start_logits = start_logits * (1.0 - p_mask) - _MASK_VALUE * p_mask
        start_log_probs = tf.nn.log_softmax(start_logits, axis=-1)
        outputs = {"start_logits": start_logits}
        if "start_positions" in features:
            positions = tf.reshape(tf.cast(features["start_positions"], tf.int32), [-1])
            start_h = tf.gather(h, positions, batch_dims=1)  # [B, H]
            outputs["end_logits"] = self._end_logits(h, start_h[:, None, :], p_mask)
        else:
            seq_len = tf.shape(h)[1]
            k = tf.minimum(self.start_n_top, seq_len)
            top_log_probs, top_index = tf.math.top_k(start_log_probs, k=k)
            start_h = tf.gather(h, top_index, batch_dims=1)  # [B, k, H]
            end_logits = self._end_logits(h[:, None], start_h[:, :, None, :], p_mask[:, None])  # [B, k, T]
            end_log_probs = tf.nn.log_softmax(end_logits, axis=-1)
            end_top_log_probs, end_top_index = tf.math.top_k(end_log_probs, k=tf.minimum(self.end_n_top, seq_len))
            outputs.update(end_logits=end_logits[:, 0], start_top_log_probs=top_log_probs,
                           start_top_index=top_index, end_top_log_probs=end_top_log_probs,
                           end_top_index=end_top_index)
        start_p = tf.cast(tf.nn.softmax(start_logits, axis=-1), h.dtype)
        start_summary = tf.einsum("bt,bth->bh", start_p, h)
        answer = self.answer_dense_0(tf.concat([start_summary, h[:, 0]], axis=-1))
        answer = self.answer_dropout(answer, training=training)
        outputs["cls_logits"] = tf.cast(tf.squeeze(self.answer_dense_1(answer), -1), tf.float32)
        return outputs

    def _forward(self, x, y, training):
        if self.version_2 and y is not None:
            # Teacher forcing: the end logits see the gold start, as the original's training graph.
            features = self.features(x)
            features["start_positions"] = _labels(y)["start_positions"]
            return self(features, training=training)
        return self(x, training=training)

    # ---------------------------------------------------------------- loss
    def loss_terms(self, x, y, y_pred, sample_weight=None):
        labels = _labels(y)
        start_nll = _position_nll(tf.nn.log_softmax(y_pred["start_logits"], -1), labels["start_positions"])
        end_nll = _position_nll(tf.nn.log_softmax(y_pred["end_logits"], -1), labels["end_positions"])
        per_example = 0.5 * (start_nll + end_nll)
        if self.version_2:
            if "is_impossible" not in labels:
                raise ValueError("AlbertSpanQA(version_2=True) needs 'is_impossible' in the labels.")
            target = tf.reshape(tf.cast(labels["is_impossible"], tf.float32), [-1])
            per_example += 0.5 * tf.nn.sigmoid_cross_entropy_with_logits(labels=target,
                                                                          logits=y_pred["cls_logits"])
        if sample_weight is not None:
            per_example = per_example * tf.reshape(tf.cast(sample_weight, tf.float32), [-1])
        return tf.reduce_sum(per_example), tf.cast(tf.shape(per_example)[0], tf.float32)

    def _task_args(self) -> dict:
        return {"version_2": self.version_2, "max_query_length": self.max_query_length,
                "start_n_top": self.start_n_top, "end_n_top": self.end_n_top, "dropout_rate": self.dropout_rate,
                "doc_stride": self.doc_stride, "null_score_diff_threshold": self.null_score_diff_threshold,
                "max_answer_length": self.max_answer_length, "n_best_size": self.n_best_size}

    def head_variable_map(self) -> Dict[str, tf.Variable]:
        if not self.version_2:
            return {"cls/squad/output_weights": self.span_head.output_weights,
                    "cls/squad/output_bias": self.span_head.output_bias}
        # The original v2 head's scopes (start_logits, end_logits, answer_class).
        return {
            "start_logits/dense/kernel": self.start_dense.kernel,
            "start_logits/dense/bias": self.start_dense.bias,
            "end_logits/dense_0/kernel": self.end_dense_0.kernel,
            "end_logits/dense_0/bias": self.end_dense_0.bias,
            "end_logits/LayerNorm/gamma": self.end_layer_norm.gamma,
            "end_logits/LayerNorm/beta": self.end_layer_norm.beta,
            "end_logits/dense_1/kernel": self.end_dense_1.kernel,
            "end_logits/dense_1/bias": self.end_dense_1.bias,
            "answer_class/dense_0/kernel": self.answer_dense_0.kernel,
            "answer_class/dense_0/bias": self.answer_dense_0.bias,
            "answer_class/dense_1/kernel": self.answer_dense_1.kernel,
        }
