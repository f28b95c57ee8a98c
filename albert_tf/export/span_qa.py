"""Span QA serving: best-span decoding (v1 logits, v2 beam) and the serving module."""

from __future__ import annotations

import tensorflow as tf

from albert_tf.export.base import _f32, _piece_table, _Serving, _spec
from albert_tf.export.pieces import decode_pieces, decoding_table

# A logit for spans that are not allowed (outside the context, end < start).
_NEG = -1e9


def best_spans(start_logits, end_logits, context_mask, max_answer_length: int):
    """The highest start+end logit span inside the context, end >= start.

    Args:
        start_logits, end_logits: float [B, T].
        context_mask: bool [B, T], the positions an answer may use.
        max_answer_length: longest span in positions.

    Returns:
        (start, end, score): int32 [B] positions (inclusive) and float32 [B];
        start = end = -1 and score = -1e9 where no position is allowed.

    Example:
    >>> s, e, score = best_spans(tf.constant([[0., 3., 1.]]), tf.constant([[0., 1., 2.]]),
    ...                          tf.constant([[False, True, True]]), 30)
    >>> s.numpy(), e.numpy(), score.numpy()
    (array([1], dtype=int32), array([2], dtype=int32), array([5.], dtype=float32))
    """
    start_logits, end_logits = _f32(start_logits), _f32(end_logits)
    seq_len = tf.shape(start_logits)[1]
    pos = tf.range(seq_len)
    length = pos[tf.newaxis, :] - pos[:, tf.newaxis]  # [T(start), T(end)]: end - start
    allowed_span = tf.logical_and(length >= 0, length < max_answer_length)
    allowed = tf.logical_and(context_mask[:, :, tf.newaxis], context_mask[:, tf.newaxis, :])
    allowed = tf.logical_and(allowed, allowed_span[tf.newaxis])
    scores = start_logits[:, :, tf.newaxis] + end_logits[:, tf.newaxis, :]
    scores = tf.where(allowed, scores, _NEG)
    flat = tf.reshape(scores, [tf.shape(scores)[0], -1])
    best = tf.argmax(flat, axis=-1, output_type=tf.int32)
    score = tf.reduce_max(flat, axis=-1)
    found = tf.reduce_any(context_mask, axis=-1)
    start = tf.where(found, best // seq_len, -1)
    end = tf.where(found, best % seq_len, -1)
    return start, end, tf.where(found, score, _NEG)


def best_beam_spans(start_top_log_probs, start_top_index, end_top_log_probs, end_top_index, context_mask,
                    max_answer_length: int):
    """The best span among a SQuAD-v2 head's beam (k starts x k' ends each).

    Scores are start + end log-probabilities, as the original v2
    post-processing; spans must lie in the context with end >= start and at
    most max_answer_length positions.

    Args:
        start_top_log_probs, start_top_index: [B, k].
        end_top_log_probs, end_top_index: [B, k, k'].
        context_mask: bool [B, T].
        max_answer_length: longest span in positions.

    Returns:
        (start, end, score) as `best_spans`: int32 [B], int32 [B], float32 [B];
        -1, -1, -1e9 where no beam span is allowed.

    Example:
    >>> s, e, score = best_beam_spans(tf.constant([[-0.1, -2.0]]), tf.constant([[2, 1]]),
    ...                               tf.constant([[[-0.5, -1.0], [-0.2, -3.0]]]), tf.constant([[[1, 2], [1, 2]]]),
    ...                               tf.constant([[False, True, True]]), 30)
    >>> s.numpy(), e.numpy(), score.numpy()
    (array([2], dtype=int32), array([2], dtype=int32), array([-1.1], dtype=float32))
    """
    start_index = tf.cast(start_top_index, tf.int32)
    end_index = tf.cast(end_top_index, tf.int32)
    starts = tf.broadcast_to(start_index[:, :, tf.newaxis], tf.shape(end_index))
    batch = tf.shape(end_index)[0]
    starts = tf.reshape(starts, [batch, -1])
    ends = tf.reshape(end_index, [batch, -1])
    scores = tf.reshape(_f32(start_top_log_probs)[:, :, tf.newaxis] + _f32(end_top_log_probs), [batch, -1])
    allowed = tf.logical_and(tf.gather(context_mask, starts, batch_dims=1),
                             tf.gather(context_mask, ends, batch_dims=1))
    allowed = tf.logical_and(allowed, tf.logical_and(ends >= starts, ends - starts < max_answer_length))
    scores = tf.where(allowed, scores, _NEG)
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    found = tf.reduce_any(allowed, axis=-1)
    start = tf.where(found, tf.gather(starts, best, batch_dims=1), -1)
    end = tf.where(found, tf.gather(ends, best, batch_dims=1), -1)
    return start, end, tf.where(found, tf.reduce_max(scores, axis=-1), _NEG)


class _SpanQAServing(_Serving):
    def __init__(self, model, preprocessor, head, max_answer_length: int):
        super().__init__(model, preprocessor, head)
        self.max_answer_length = int(max_answer_length)
        self.pieces = tf.constant(decoding_table(_piece_table(preprocessor)))

    def text_functions(self):
        @tf.function(input_signature=[_spec([None], tf.string, "text"), _spec([None], tf.string, "text_pair")])
        def serve_question_context(text, text_pair):
            return self.outputs(self.text_ids(text, text_pair))

        return {"serving_default": serve_question_context}

    def outputs(self, ids):
        input_ids = tf.cast(ids["input_ids"], tf.int32)
        out = self._call_model(ids)
        # The context: segment 1, real tokens, not its closing [SEP].
        context = tf.logical_and(tf.equal(tf.cast(ids["segment_ids"], tf.int32), 1),
                                 tf.cast(ids["input_mask"], tf.bool))
        context = tf.logical_and(context, tf.not_equal(input_ids, self.preprocessor.sep_id))
        if "start_top_index" in out:  # SQuAD v2 head: ends depend on the start (beam)
            start, end, score = best_beam_spans(out["start_top_log_probs"], out["start_top_index"],
                                                out["end_top_log_probs"], out["end_top_index"], context,
                                                self.max_answer_length)
        else:
            start, end, score = best_spans(out["start_logits"], out["end_logits"], context,
                                           self.max_answer_length)
        found = start >= 0
        span = tf.ragged.range(tf.maximum(start, 0), tf.where(found, end + 1, 0))
        answer_ids = tf.gather(input_ids, span, batch_dims=1)
        if self.text_signatures:
            answer = self.preprocessor.detokenize(answer_ids)
        else:  # no SentencePiece op in an ids-only export
            answer = decode_pieces(self.pieces, answer_ids)
        first_context = tf.argmax(tf.cast(context, tf.int32), axis=-1, output_type=tf.int32)
        result = {
            "answer": tf.where(found, answer, ""),
            "start": tf.where(found, start - first_context, -1),
            "end": tf.where(found, end - first_context, -1),
            "score": score,
        }
        if "cls_logits" in out:
            result["no_answer_probability"] = tf.sigmoid(tf.reshape(_f32(out["cls_logits"]), [-1]))
        return result
