"""Serving of the sequence classifier (and regression) and the token tagger."""

from __future__ import annotations

from typing import List, Sequence

import tensorflow as tf

from albert_tf.export.base import _f32, _piece_table, _Serving, _task_config, has_tokenizer
from pipelines.masking import CLS_ID, SEP_ID


def trained_on_pairs(model) -> bool:
    """Whether a classifier records that it was trained on text pairs (`AlbertClassifier.text_pairs`,
    task_config.json's "text_pairs"); False for single texts and for models that do not say."""
    value = getattr(model, "text_pairs", None)
    if value is None:
        value = _task_config(model).get("text_pairs")
    return bool(value)


class _ClassifierServing(_Serving):
    def __init__(self, model, preprocessor, head, label_names: Sequence[str]):
        super().__init__(model, preprocessor, head)
        self.num_classes = len(label_names)
        self.label_names = tf.constant(list(label_names))

    def names_asset(self):
        return ("label", self.label_names) if self.num_classes > 1 else None

    def text_functions(self):
        """A model trained on text pairs (`text_pairs` True) takes them by default too: its `serving_default`
        is `serve_text_pair` (a single text would get an answer from inputs it never saw). Otherwise
        (single texts, or not known) `serving_default` takes one text and `serve_text_pair` a pair."""
        functions = super().text_functions()
        if trained_on_pairs(self.model):
            return {"serving_default": functions["serve_text_pair"], "serve_text_pair": functions["serve_text_pair"]}
        return functions

    def outputs(self, ids):
        logits = _f32(self._call_model(ids))
        if self.num_classes == 1:
            return {"value": logits[:, 0], "logits": logits}
        return {
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32)),
            "logits": logits,
        }


# SentencePiece's word-boundary mark: a piece that starts with it begins a word.
WORD_START = "\u2581"


def word_start_table(pieces: Sequence[str]) -> List[bool]:
    """Per piece id: whether the piece begins a word (it starts with "▁").

    The tagging reader (`pipelines.finetune.tagging`) cuts each word of a
    sentence into pieces alone and labels only the word's first piece, which
    SentencePiece always starts with "▁" (a word of unknown characters is "▁"
    then <unk>); [CLS], [SEP] and continuation pieces carry no label.

    Example:
    >>> word_start_table(["<pad>", "[CLS]", "\u2581ka", "fe", "\u2581"])
    [False, False, True, False, True]
    """
    return [piece.startswith(WORD_START) for piece in pieces]


class _TaggingServing(_Serving):
    """One tag per word, at the word's first piece: the positions the training labelled.

    Without a SentencePiece model (an ids-only export with none) the pieces
    are not known: every real position other than [CLS] and [SEP] is tagged.
    """

    def __init__(self, model, preprocessor, head, tag_names: Sequence[str]):
        super().__init__(model, preprocessor, head)
        self.tag_names = tf.constant(list(tag_names))
        # Without a SentencePiece model (an ids-only export) the tokens are not named: no `pieces` output.
        table = _piece_table(preprocessor) if has_tokenizer(preprocessor) else None
        self.pieces = None if table is None else tf.constant(table)
        self.word_starts = None if table is None else tf.constant(word_start_table(table))

    def names_asset(self):
        return ("tag", self.tag_names)

    def text_functions(self):
        """Single texts only: the tagging reader never packs a pair, so a pair has no trained answer."""
        return {"serving_default": super().text_functions()["serving_default"]}

    def outputs(self, ids):
        input_ids = tf.cast(ids["input_ids"], tf.int32)
        real = tf.cast(ids["input_mask"], tf.bool)
        if self.word_starts is not None:
            tagged = tf.logical_and(real, tf.gather(self.word_starts, input_ids))
        else:
            special = tf.logical_or(tf.equal(input_ids, CLS_ID), tf.equal(input_ids, SEP_ID))
            tagged = tf.logical_and(real, tf.logical_not(special))
        logits = _f32(self._call_model(ids))
        tag_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
        result = {
            "tags": tf.where(tagged, tf.gather(self.tag_names, tag_ids), ""),
            "tag_ids": tf.where(tagged, tag_ids, -1),
            "input_mask": tf.cast(real, tf.int32),
        }
        if self.pieces is not None:
            result["pieces"] = tf.where(real, tf.gather(self.pieces, input_ids), "")
        return result
