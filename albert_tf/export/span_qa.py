"""Span QA serving: sliding windows over long contexts, best-span decoding
(v1 logits, v2 beam) across the windows, and the v2 no-answer threshold.

The text signature cuts the context into the windows the SQuAD reader
(`pipelines.finetune.squad`) makes for training: `[CLS] question [SEP] window
[SEP]`, windows of max_seq_length - len(question) - 3 pieces starting every
min(that, doc_stride) pieces. Every window is scored, and the answer is the
best span over all windows whose start has its most context in that window
(the original's `_is_max_context`), as the original's post-processing picks
it. SQuAD v2 heads answer "" when the null odds (the smallest answerability
logit over the windows) exceed `null_score_diff_threshold`.

The answer is the context's own text (`albert_tf.export.char_offsets`: each
piece's characters in the context as the client sent it), whitespace
stripped, with its character offsets `start_char`/`end_char`; spans whose
text is only whitespace are skipped, as the SQuAD post-processing skips
empty answers. It is never decoded pieces: a context whose offsets could
not be trusted (`PieceOffsets.aligned`, never seen on valid UTF-8) gets no
answer ("", start = start_char = -1).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.export.base import ID_INPUTS, _f32, _piece_table, _Serving, _spec
from albert_tf.layers.preprocessor import at_least_one_position
from albert_tf.export.char_offsets import answer_text, has_text, piece_offsets
from albert_tf.export.pieces import decode_pieces, decoding_table
from pipelines.tokenizer import SentencePieceVocab

# A logit for spans that are not allowed (outside the context, end < start).
_NEG = -1e9


def _shift_left(x: tf.Tensor, k: int, fill) -> tf.Tensor:
    """x[:, t + k] at t (fill past the end), for x [B, T]."""
    return tf.concat([x[:, k:], tf.fill([tf.shape(x)[0], tf.minimum(k, tf.shape(x)[1])], fill)], axis=1)


def in_top(logits, n: int):
    """bool [B, T]: the n highest logits of each row (ties: the lower position first, as a stable sort).

    Example:
    >>> in_top(tf.constant([[0., 3., 1., 3.]]), 2).numpy()
    array([[False,  True, False,  True]])
    """
    k = tf.minimum(int(n), tf.shape(logits)[1])
    top = tf.math.top_k(logits, k=k).indices  # top_k puts the lower index first on ties
    return tf.reduce_any(tf.cast(tf.one_hot(top, tf.shape(logits)[1], dtype=tf.int32), tf.bool), axis=1)


def best_spans(start_logits, end_logits, context_mask, max_answer_length: int, start_mask=None, text_mask=None,
               n_best_size=None):
    """The highest start+end logit span inside the context, end >= start.

    Only the max_answer_length ends after each start are scored ([B, T, A],
    not [B, T, T]); ties go to the earliest start, then the earliest end.
    With `n_best_size`, a span starts at one of the n highest start logits of
    its row and ends at one of the n highest end logits, as
    `pipelines.finetune.squad.postprocess_predictions` decodes each window
    (the row's every position ranked, [CLS] and the question included).

    Args:
        start_logits, end_logits: float [B, T].
        context_mask: bool [B, T], the positions an answer may use.
        max_answer_length: longest span in positions.
        start_mask: optional bool [B, T], where an answer may start (default:
            the context; the windowed serving passes the max-context tokens).
        text_mask: optional bool [B, T]: a span must hold at least one such
            position (the pieces whose context text is not only whitespace:
            a span without text is skipped, as the SQuAD post-processing
            skips empty answers).
        n_best_size: optional int, see above; None: every start and end.

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
    context_mask = tf.cast(context_mask, tf.bool)
    start_mask = context_mask if start_mask is None else tf.logical_and(tf.cast(start_mask, tf.bool), context_mask)
    end_mask = context_mask
    if n_best_size is not None:
        start_mask = tf.logical_and(start_mask, in_top(start_logits, n_best_size))
        end_mask = tf.logical_and(end_mask, in_top(end_logits, n_best_size))
    width = int(max_answer_length)
    # [B, T, A]: the span (t, t + j) for j < A.
    ends_logits = tf.stack([_shift_left(end_logits, j, 0.0) for j in range(width)], axis=-1)
    ends_allowed = tf.stack([_shift_left(end_mask, j, False) for j in range(width)], axis=-1)
    allowed = tf.logical_and(start_mask[:, :, tf.newaxis], ends_allowed)
    if text_mask is not None:
        # Text positions in (t, t + j): a running count at t + j minus the one before t.
        count = tf.cumsum(tf.cast(text_mask, tf.int32), axis=1)
        before = count - tf.cast(text_mask, tf.int32)
        ends_count = tf.stack([_shift_left(count, j, 0) for j in range(width)], axis=-1)
        allowed = tf.logical_and(allowed, ends_count > before[:, :, tf.newaxis])
    scores = tf.where(allowed, start_logits[:, :, tf.newaxis] + ends_logits, _NEG)
    flat = tf.reshape(scores, [tf.shape(scores)[0], -1])
    best = tf.argmax(flat, axis=-1, output_type=tf.int32)
    found = tf.reduce_any(tf.reshape(allowed, [tf.shape(allowed)[0], -1]), axis=-1)
    start = tf.where(found, best // width, -1)
    end = tf.where(found, best // width + best % width, -1)
    return start, end, tf.where(found, tf.reduce_max(flat, axis=-1), _NEG)


def best_beam_spans(start_top_log_probs, start_top_index, end_top_log_probs, end_top_index, context_mask,
                    max_answer_length: int, start_mask=None, text_mask=None):
    """The best span among a SQuAD-v2 head's beam (k starts x k' ends each).

    Scores are start + end log-probabilities, as the original v2
    post-processing; spans must lie in the context with end >= start and at
    most max_answer_length positions.

    Args:
        start_top_log_probs, start_top_index: [B, k].
        end_top_log_probs, end_top_index: [B, k, k'].
        context_mask: bool [B, T].
        max_answer_length: longest span in positions.
        start_mask: optional bool [B, T], where an answer may start (default:
            the context).
        text_mask: optional bool [B, T], as `best_spans`'s.

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
    context_mask = tf.cast(context_mask, tf.bool)
    start_mask = context_mask if start_mask is None else tf.logical_and(tf.cast(start_mask, tf.bool), context_mask)
    start_index = tf.cast(start_top_index, tf.int32)
    end_index = tf.cast(end_top_index, tf.int32)
    starts = tf.broadcast_to(start_index[:, :, tf.newaxis], tf.shape(end_index))
    batch = tf.shape(end_index)[0]
    starts = tf.reshape(starts, [batch, -1])
    ends = tf.reshape(end_index, [batch, -1])
    scores = tf.reshape(_f32(start_top_log_probs)[:, :, tf.newaxis] + _f32(end_top_log_probs), [batch, -1])
    allowed = tf.logical_and(tf.gather(start_mask, starts, batch_dims=1),
                             tf.gather(context_mask, ends, batch_dims=1))
    allowed = tf.logical_and(allowed, tf.logical_and(ends >= starts, ends - starts < max_answer_length))
    if text_mask is not None:
        text = tf.cast(text_mask, tf.int32)
        count = tf.cumsum(text, axis=1)
        inside = tf.gather(count, ends, batch_dims=1) - tf.gather(count - text, starts, batch_dims=1)
        allowed = tf.logical_and(allowed, inside > 0)
    scores = tf.where(allowed, scores, _NEG)
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    found = tf.reduce_any(allowed, axis=-1)
    start = tf.where(found, tf.gather(starts, best, batch_dims=1), -1)
    end = tf.where(found, tf.gather(ends, best, batch_dims=1), -1)
    return start, end, tf.where(found, tf.reduce_max(scores, axis=-1), _NEG)


def window_starts(num_pieces, window_length, doc_stride: int):
    """Windows over each context as the SQuAD reader cuts them for training.

    Args:
        num_pieces: int32 [B], context pieces per example.
        window_length: int32 [B], context pieces a window holds
            (max_seq_length - len(question) - 3), >= 1.
        doc_stride: the reader's --doc_stride.

    Returns:
        (example, start, length): int32 [W] per window: its example, its
        first context piece and its number of pieces. Every example has at
        least one window (an empty context: one window of length 0).

    Example:
    >>> ex, start, length = window_starts(tf.constant([10, 0]), tf.constant([4, 4]), 3)
    >>> ex.numpy().tolist(), start.numpy().tolist(), length.numpy().tolist()
    ([0, 0, 0, 1], [0, 3, 6, 0], [4, 4, 4, 0])
    """
    num_pieces = tf.cast(num_pieces, tf.int32)
    window_length = tf.cast(window_length, tf.int32)
    step = tf.minimum(window_length, doc_stride)
    # The reader moves by `step` until a window reaches the end of the context.
    count = 1 + tf.maximum(0, (num_pieces - window_length + step - 1) // step)
    example = tf.repeat(tf.range(tf.shape(num_pieces)[0]), count)
    index = tf.ragged.range(count).flat_values
    start = index * tf.gather(step, example)
    length = tf.maximum(0, tf.minimum(tf.gather(window_length, example), tf.gather(num_pieces, example) - start))
    return example, start, length


def max_context_mask(example, start, length, num_pieces, window_length, doc_stride: int) -> tf.RaggedTensor:
    """bool [W, None]: is each window's piece in its max-context window (the original's `_is_max_context`)?

    A piece at context position a is scored in every window v holding it by
    min(a - start_v, end_v - a) + 0.01 * length_v; the first window with the
    highest score has it in its max context. The arguments are
    `window_starts`'s and its inputs.

    Example:
    >>> ex, start, length = window_starts(tf.constant([10]), tf.constant([4]), 3)
    >>> max_context_mask(ex, start, length, tf.constant([10]), tf.constant([4]), 3).to_list()
    [[True, True, True, True], [False, True, True, True], [False, True, True, True]]
    """
    num_pieces = tf.gather(tf.cast(num_pieces, tf.int32), example)  # per window
    window_length = tf.gather(tf.cast(window_length, tf.int32), example)
    step = tf.minimum(window_length, doc_stride)
    count = 1 + tf.maximum(0, (num_pieces - window_length + step - 1) // step)
    positions = tf.ragged.range(start, start + length)  # [W, None]: context positions of the pieces
    row = positions.value_rowids()
    a = positions.flat_values
    own, step_p, length_p, count_p, pieces_p = (tf.gather(t, row) for t in (start // tf.maximum(step, 1), step,
                                                                          window_length, count, num_pieces))
    # The windows holding a are v in [ceil((a - L + 1) / step), a // step]: at most ceil(L / step).
    span = tf.reduce_max(tf.concat([(window_length + step - 1) // tf.maximum(step, 1), [1]], axis=0))
    v = tf.minimum(count_p - 1, a // tf.maximum(step_p, 1))[:, tf.newaxis] - tf.range(span)[tf.newaxis, :]
    v_start = v * step_p[:, tf.newaxis]
    v_length = tf.minimum(length_p[:, tf.newaxis], pieces_p[:, tf.newaxis] - v_start)
    holds = (v >= 0) & (a[:, tf.newaxis] < v_start + v_length)
    a64, s64, l64 = (tf.cast(t, tf.float64) for t in (a[:, tf.newaxis], v_start, v_length))
    score = tf.where(holds, tf.minimum(a64 - s64, s64 + l64 - 1.0 - a64) + 0.01 * l64, -1.0)
    top = tf.reduce_max(score, axis=1, keepdims=True)
    best = tf.reduce_min(tf.where(holds & tf.equal(score, top), v, tf.int32.max), axis=1)
    return positions.with_flat_values(tf.equal(best, own))


class _SpanQAServing(_Serving):
    """Question + context in, the best answer over the context's windows out."""

    def __init__(self, model, preprocessor, head, max_answer_length: int, doc_stride: int,
                 max_context_length: int, null_score_diff_threshold: float, n_best_size: int = None):
        super().__init__(model, preprocessor, head)
        # v1: each window's top n starts and ends, as fine-tuning decoded (None: every span).
        self.n_best_size = None if n_best_size is None else int(n_best_size)
        self.max_answer_length = int(max_answer_length)
        self.doc_stride = int(doc_stride)
        self.max_context_length = int(max_context_length)
        self.null_score_diff_threshold = float(null_score_diff_threshold)
        self.pieces = tf.constant(decoding_table(_piece_table(preprocessor)))

    def serving_settings(self):
        return dict(super().serving_settings(), max_answer_length=self.max_answer_length, doc_stride=self.doc_stride,
                    max_context_length=self.max_context_length,
                    null_score_diff_threshold=self.null_score_diff_threshold, n_best_size=self.n_best_size)

    def text_functions(self):
        @tf.function(autograph=False,
                     input_signature=[_spec([None], tf.string, "text"), _spec([None], tf.string, "text_pair")])
        def serve_question_context(text, text_pair):
            return self.answer(*self.windows(text, text_pair))

        # The contexts' pieces with their offsets in the text (tracked: saved with the graph).
        vocab = SentencePieceVocab.from_proto(self.preprocessor.spm_model_proto)
        self.context_tokenizer = tf_text.SentencepieceTokenizer(model=vocab.model_proto, out_type=tf.int32)
        self._resplit = tf.ragged.constant(vocab.resplit, dtype=tf.int32) if vocab.needs_resplit() else None

        return {"serving_default": serve_question_context}

    def windows(self, question, context):
        """Strings [B] -> (ids [W, T], example [W], first context piece [W], start_mask [W, T], B,
        text_mask [W, T], the contexts' `PieceOffsets`)."""
        pre = self.preprocessor
        max_len = int(pre.max_seq_length)
        # At least one context piece per window (the reader's windows need one).
        query_length = min(int(getattr(self.model, "max_query_length", max_len)), max_len - 4)
        query = pre.tokenize(question, query_length)[:, :query_length]
        offsets = piece_offsets(self.context_tokenizer, self._resplit, context, self.max_context_length,
                                pre.do_lower_case, pre.normalization)
        cut = slice(None), slice(None, self.max_context_length)
        offsets = offsets._replace(ids=offsets.ids[cut], first_char=offsets.first_char[cut],
                                   last_char=offsets.last_char[cut])
        pieces = offsets.ids
        num_pieces = tf.cast(pieces.row_lengths(), tf.int32)
        window_length = max_len - 3 - tf.cast(query.row_lengths(), tf.int32)
        example, start, length = window_starts(num_pieces, window_length, self.doc_stride)
        positions = tf.ragged.range(start, start + length)
        first_piece = tf.gather(tf.cast(pieces.row_starts(), tf.int32), example)  # per window
        flat = tf.gather(first_piece, positions.value_rowids()) + positions.flat_values
        window = positions.with_flat_values(tf.gather(pieces.flat_values, flat))
        window_text = positions.with_flat_values(tf.gather(has_text(offsets).flat_values, flat))
        window_query = tf.gather(query, example)
        ids = pre.pack(window_query, window)
        is_max = max_context_mask(example, start, length, num_pieces, window_length, self.doc_stride)
        # The packed row: [CLS] query [SEP] window [SEP]; only window pieces may start an answer.
        two = tf.RaggedTensor.from_tensor(tf.zeros([tf.shape(example)[0], 2], tf.bool))
        shape = tf.cast(tf.shape(ids["input_ids"]), tf.int64)
        start_mask, text_mask = (
            tf.concat([tf.zeros_like(window_query, tf.bool), two, m], axis=1).with_row_splits_dtype(tf.int64)
            .to_tensor(False, shape=shape) for m in (is_max, window_text))
        return ids, example, start, start_mask, tf.shape(question)[0], text_mask, offsets

    def outputs(self, ids):
        """serve_token_ids: each row is one window of its own example."""
        rows = tf.shape(ids["input_ids"])[0]
        return self.answer(ids, tf.range(rows), tf.zeros([rows], tf.int32), None, rows)

    def answer(self, ids, example, offset, start_mask, batch, text_mask=None, offsets=None):
        """Scores the windows and keeps each example's best span (see the module docstring).

        With the contexts' `offsets` (the text signature) the answer is the
        context's own text, whitespace stripped, at characters
        [start_char, end_char); without (serve_token_ids) it is the decoded
        pieces, and start_char = end_char = -1.
        """
        ids = at_least_one_position({k: tf.cast(ids[k], tf.int32) for k in ID_INPUTS})  # argmaxes need a column
        input_ids = ids["input_ids"]
        out = self._call_model(ids)
        # The context: segment 1, real tokens, not its closing [SEP].
        context = tf.logical_and(tf.equal(tf.cast(ids["segment_ids"], tf.int32), 1),
                                 tf.cast(ids["input_mask"], tf.bool))
        context = tf.logical_and(context, tf.not_equal(input_ids, self.preprocessor.sep_id))
        if start_mask is None:
            start_mask = context
        if "start_top_index" in out:  # SQuAD v2 head: ends depend on the start (beam)
            start, end, score = best_beam_spans(out["start_top_log_probs"], out["start_top_index"],
                                                out["end_top_log_probs"], out["end_top_index"], context,
                                                self.max_answer_length, start_mask=start_mask,
                                                text_mask=text_mask)
        else:
            start, end, score = best_spans(out["start_logits"], out["end_logits"], context,
                                           self.max_answer_length, start_mask=start_mask, text_mask=text_mask,
                                           n_best_size=self.n_best_size)
        # Each example's best window (the first on ties, as the original's stable sort).
        by_example = tf.RaggedTensor.from_value_rowids(score, example, nrows=batch)
        scores = by_example.to_tensor(2 * _NEG)
        # An argmax needs a column even when there is no row (an empty request).
        scores = tf.pad(scores, [[0, 0], [0, tf.maximum(0, 1 - tf.shape(scores)[1])]], constant_values=2 * _NEG)
        best_window = tf.cast(by_example.row_starts(), tf.int32) + tf.argmax(scores, axis=-1, output_type=tf.int32)
        has_window = by_example.row_lengths() > 0
        best_window = tf.where(has_window, best_window, 0)
        start, end, score = (tf.gather(t, best_window) for t in (start, end, score))
        found = tf.logical_and(has_window, start >= 0)
        window_ids = tf.gather(input_ids, best_window)
        # Positions in the context's pieces: from the window's first context piece, plus where the window starts.
        shift = tf.gather(offset - tf.argmax(tf.cast(context, tf.int32), axis=-1, output_type=tf.int32), best_window)
        result = {}
        if "cls_logits" in out:
            # The null odds: the smallest answerability logit over the windows (the original v2).
            null_odds = tf.math.unsorted_segment_min(tf.reshape(_f32(out["cls_logits"]), [-1]), example, batch)
            result["no_answer_probability"] = tf.sigmoid(null_odds)
            result["null_odds"] = null_odds
            # The official script's rule: no answer when the odds exceed the threshold.
            found = tf.logical_and(found, null_odds <= self.null_score_diff_threshold)
        if offsets is not None:  # a context whose offsets are not aligned: no answer (never decoded pieces)
            found = tf.logical_and(found, tf.gather(offsets.aligned, tf.range(batch)))
        span = tf.ragged.range(tf.maximum(start, 0), tf.where(found, end + 1, 0))
        answer_ids = tf.gather(window_ids, span, batch_dims=1)
        if self.text_signatures:
            answer = self.preprocessor.detokenize(answer_ids)
        else:  # no SentencePiece op in an ids-only export
            answer = decode_pieces(self.pieces, answer_ids)
        start_char = end_char = tf.fill(tf.shape(found), -1)
        if offsets is not None:
            # The context's own characters.
            answer, start_char, end_char = answer_text(offsets, tf.range(batch), start + shift, end + shift, found)
        result.update({
            "answer": tf.where(found, answer, ""),
            "start": tf.where(found, start + shift, -1),
            "end": tf.where(found, end + shift, -1),
            "start_char": start_char,
            "end_char": end_char,
            "score": score,
        })
        return result
