"""Multiple-choice serving: a context and N choices per row."""

from __future__ import annotations

import tensorflow as tf

from albert_tf.export.base import _argmax_last, _f32, _Serving, _spec


class _MultipleChoiceServing(_Serving):
    ids_rank = 3

    def __init__(self, model, preprocessor, head, num_choices: int):
        super().__init__(model, preprocessor, head)
        self.num_choices = int(num_choices)

    def text_functions(self):
        @tf.function(autograph=False, input_signature=[_spec([None], tf.string, "text"),
                                      _spec([None, self.num_choices], tf.string, "choices")])
        def serve_text_choices(text, choices):
            return self.outputs(self.pack_choices(text, choices))

        return {"serving_default": serve_text_choices}

    def pack_choices(self, text, choices):
        """[B] contexts x [B, N] choices -> id tensors [B, N, T] ([CLS] text [SEP] choice [SEP])."""
        return self.model.features({"text": text, "choices": choices})

    def outputs(self, ids):
        logits = _f32(self._call_model(ids))
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "logits": logits,
            "choice": _argmax_last(logits),
        }
