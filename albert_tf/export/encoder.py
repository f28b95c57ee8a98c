"""Serving of the encoder (embeddings) and the pretrainer (fill-mask)."""

from __future__ import annotations

import tensorflow as tf

from albert_tf.layers.preprocessor import at_least_one_position, cut_text

from albert_tf.export.base import ID_INPUTS, _f32, _max_len, _piece_table, _Serving, _spec, has_tokenizer

# What a fill-mask request writes where a piece is to be predicted.
MASK_TOKEN = "[MASK]"


class _EncoderServing(_Serving):
    def outputs(self, ids):
        out = self._call_model(ids)
        return {
            "pooled_output": _f32(out["pooled_output"]),
            "sequence_output": _f32(out["sequence_output"]),
            "input_mask": tf.cast(ids["input_mask"], tf.int32),
        }


class _PretrainerServing(_Serving):
    """Fill-mask: `[MASK]` in the text becomes the [MASK] id; top-k per mask (ids, scores and, with a
    SentencePiece model, pieces)."""

    def __init__(self, model, preprocessor, head, top_k: int):
        super().__init__(model, preprocessor, head)
        # Without a SentencePiece model (an ids-only export) the candidates are ids only: no top_k_pieces.
        pieces = _piece_table(preprocessor) if has_tokenizer(preprocessor) else None
        self.pieces = None if pieces is None else tf.constant(pieces)
        self.top_k = min(int(top_k), model.config.vocab_size if pieces is None else len(pieces))
        self.mask_id = int(preprocessor.mask_id)

    def text_functions(self):
        @tf.function(autograph=False, input_signature=[_spec([None], tf.string, "text")])
        def serve_text(text):
            return self.outputs(self.pack_with_masks(text))

        return {"serving_default": serve_text}

    def pack_with_masks(self, text):
        """[CLS] pieces [SEP] with every literal "[MASK]" as the [MASK] id.

        The text is split at "[MASK]" and each part is normalised and
        tokenized alone, then the parts are joined with the [MASK] id, cut to
        max_seq_length - 2 as the single-text packing does, and padded.
        """
        pre = self.preprocessor
        # Bounded work for huge texts: what could fill max_seq_length pieces (`cut_text`).
        parts = tf.strings.split(cut_text(text, _max_len(pre)), sep=MASK_TOKEN)  # [B, S]
        part_ids = pre.tokenize(parts.flat_values)  # [B*S, P]
        part_ids = tf.RaggedTensor.from_row_splits(part_ids, parts.row_splits)  # [B, S, P]
        masks = tf.ones_like(tf.reduce_sum(part_ids, axis=2, keepdims=True)) * self.mask_id  # [B, S, 1]
        with_masks = tf.concat([part_ids, tf.cast(masks, part_ids.dtype)], axis=2).merge_dims(1, 2)
        body = with_masks[:, :-1]  # no [MASK] after the last part
        body = body[:, : _max_len(pre) - 2]
        batch = tf.shape(text)[0]
        cls = tf.fill([batch, 1], tf.cast(pre.cls_id, body.dtype))
        sep = tf.fill([batch, 1], tf.cast(pre.sep_id, body.dtype))
        packed = tf.concat([cls, body, sep], axis=1)
        input_ids = tf.cast(packed.to_tensor(default_value=pre.pad_id), tf.int32)
        input_mask = tf.cast(tf.ones_like(packed).to_tensor(default_value=0), tf.int32)
        return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": tf.zeros_like(input_ids)}

    def outputs(self, ids):
        input_ids = tf.cast(ids["input_ids"], tf.int32)
        is_mask = tf.logical_and(tf.equal(input_ids, self.mask_id), tf.cast(ids["input_mask"], tf.bool))
        seq_len = tf.shape(input_ids)[1]
        positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(seq_len), tf.shape(input_ids)), is_mask)
        valid = tf.ones_like(positions, tf.bool).to_tensor(default_value=False)  # [B, M]
        dense_positions = positions.to_tensor(default_value=0)
        # An empty request has no [CLS] column; the encoder reads position 0.
        inputs = at_least_one_position({k: tf.cast(ids[k], tf.int32) for k in ID_INPUTS})
        inputs["masked_lm_positions"] = dense_positions
        logits = _f32(self.run_model(inputs)["mlm_logits"])  # [B, M, V]
        scores, top_ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=self.top_k)
        keep = valid[:, :, tf.newaxis]
        result = {
            "masked_positions": tf.where(valid, dense_positions, -1),
            "top_k_ids": tf.where(keep, top_ids, -1),
            "top_k_scores": tf.where(keep, scores, 0.0),
        }
        if self.pieces is not None:
            result["top_k_pieces"] = tf.where(keep, tf.gather(self.pieces, top_ids), "")
        return result
