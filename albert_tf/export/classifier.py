"""Serving of the sequence classifier (and regression) and the token tagger."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from albert_tf.export.base import _f32, _piece_table, _Serving, has_tokenizer


class _ClassifierServing(_Serving):
    def __init__(self, model, preprocessor, head, label_names: Sequence[str]):
        super().__init__(model, preprocessor, head)
        self.num_classes = len(label_names)
        self.label_names = tf.constant(list(label_names))

    def names_asset(self):
        return ("label", self.label_names) if self.num_classes > 1 else None

    def outputs(self, ids):
        logits = _f32(self._call_model(ids))
        if self.num_classes == 1:
            return {"value": logits[:, 0], "logits": logits}
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32)),
            "logits": logits,
        }


class _TaggingServing(_Serving):
    def __init__(self, model, preprocessor, head, tag_names: Sequence[str]):
        super().__init__(model, preprocessor, head)
        self.tag_names = tf.constant(list(tag_names))
        # Without a SentencePiece model (an ids-only export) the tokens are not named: no `pieces` output.
        self.pieces = tf.constant(_piece_table(preprocessor)) if has_tokenizer(preprocessor) else None

    def names_asset(self):
        return ("tag", self.tag_names)

    def outputs(self, ids):
        input_ids = tf.cast(ids["input_ids"], tf.int32)
        real = tf.cast(ids["input_mask"], tf.bool)
        logits = _f32(self._call_model(ids))
        tag_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        result = {
            "tags": tf.where(real, tf.gather(self.tag_names, tag_ids), ""),
            "tag_ids": tf.where(real, tag_ids, -1),
            "input_mask": tf.cast(real, tf.int32),
        }
        if self.pieces is not None:
            result["pieces"] = tf.where(real, tf.gather(self.pieces, input_ids), "")
        return result
