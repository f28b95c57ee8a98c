"""Raw text in, the export's answers out, in this process: `model.answer(...)` without a SavedModel.

The answers are computed by the serving module `albert_tf.export` builds for
the model's head (`heads._HEAD_BUILDERS`: labels and probabilities, span
answers with character offsets, tags, fill-mask candidates), called here
through its text functions instead of being saved. So a model answers in
Python what its SavedModel answers a client (`rest_predict`'s rows), from the
same code; the only difference is that the weights stay variables
(`freeze_weights=False`), so float outputs agree to float32 rounding and
further training shows in the next call.

The serving module is built and traced once per model and settings and kept
on the model (not tracked: it is never saved with it).
"""

from __future__ import annotations

import types
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from albert_tf.export.base import has_tokenizer
from albert_tf.export.heads import _HEAD_BUILDERS, head_of
from albert_tf.export.rest import _json_value
from albert_tf.export.saved_model import _make_preprocessor

# The export settings each head takes (export_saved_model's arguments of the same names).
HEAD_SETTINGS = {
    "pretrainer": ("top_k",),
    "span_qa": ("max_answer_length", "doc_stride", "max_context_length", "null_score_diff_threshold"),
}
# The preprocessor settings every head takes (a changed one rebuilds the model's preprocessor, as the export does).
PREPROCESSOR_SETTINGS = ("spm_model_file", "max_seq_length", "do_lower_case", "normalization")
DEFAULT_BATCH_SIZE = 32

Texts = Union[str, bytes, Sequence[Union[str, bytes]], np.ndarray]


def serving_functions(model: Any, **settings) -> Dict[str, Any]:
    """The text functions of the serving module the export builds for `model` (signature name -> tf.function).

    Built once per model, settings, preprocessor and label / tag names, and
    kept on the model (untracked: never saved with it).

    Args:
        model: an `AlbertPretrainer` or a task model (`head_of` says which head).
        **settings: `PREPROCESSOR_SETTINGS` and the head's `HEAD_SETTINGS`
            (top_k; max_answer_length, doc_stride, max_context_length,
            null_score_diff_threshold), as `export_saved_model` takes them.

    Raises:
        ValueError: a setting the head does not take, or no SentencePiece
            model to read text with.
    """
    head = head_of(model)
    allowed = PREPROCESSOR_SETTINGS + HEAD_SETTINGS.get(head, ())
    unknown = sorted(k for k, v in settings.items() if k not in allowed and v is not None)
    if unknown:
        raise ValueError(f"{type(model).__name__}.answer does not take {unknown[0]}={settings[unknown[0]]!r}; "
                         f"it takes {', '.join(allowed)}.")
    cache = model.__dict__.get("_answer_functions")
    if cache is None:
        # A SimpleNamespace is not trackable: the serving module is never saved with the model.
        cache = types.SimpleNamespace(by_key={})
        model._answer_functions = cache
    # Names set after a first call (clf.label_names = [...]) are served from the next one.
    names = tuple(tuple(getattr(model, attr, None) or ()) for attr in ("label_names", "tag_names"))
    key = (id(getattr(model, "preprocessor", None)), names, tuple(sorted(settings.items())))
    if key not in cache.by_key:
        cache.by_key[key] = _build(model, head, settings)
    return cache.by_key[key]


def _build(model, head: str, settings: Dict[str, Any]) -> Dict[str, Any]:
    own = {k: settings.get(k) for k in PREPROCESSOR_SETTINGS}
    served, preprocessor = _make_preprocessor(model, own["spm_model_file"], own["max_seq_length"],
                                              own["do_lower_case"], own["normalization"])
    if not has_tokenizer(preprocessor):
        raise preprocessor.missing()
    head_settings = {k: settings.get(k) for k in HEAD_SETTINGS.get(head, ())}
    if head == "pretrainer" and head_settings["top_k"] is None:
        head_settings["top_k"] = 5  # export_saved_model's default
    if head_settings.get("top_k") is not None and head_settings["top_k"] < 1:
        raise ValueError(f"top_k must be >= 1, got {head_settings['top_k']}.")
    serving = _HEAD_BUILDERS[head](served, preprocessor, label_names=None, **head_settings)
    serving.freeze_weights = False  # variables: the model's weights as they are at each call
    return dict(serving.text_functions())


def _as_list(texts, what: str) -> List:
    if isinstance(texts, (str, bytes)):
        return [texts]
    if isinstance(texts, tf.Tensor):
        texts = texts.numpy()
    if isinstance(texts, np.ndarray):
        texts = texts.tolist()
    if not isinstance(texts, (list, tuple)):
        raise ValueError(f"{what} must be a string or a list of strings, got {type(texts).__name__}: {texts!r:.80}.")
    return list(texts)


def _inputs(head: str, model_name: str, texts: list, text_pairs, choices) -> Dict[str, list]:
    """The serving signature's inputs by name, and which signature (`signature` key)."""
    if head == "span_qa":
        if text_pairs is None:
            raise ValueError(f"{model_name}.answer needs text_pairs: the contexts the questions are answered "
                             "from (texts are the questions).")
        return {"signature": "serving_default", "text": texts, "text_pair": text_pairs}
    if head == "multiple_choice":
        if choices is None:
            raise ValueError(f"{model_name}.answer needs choices: one list of choices per text.")
        return {"signature": "serving_default", "text": texts, "choices": choices}
    if choices is not None:
        raise ValueError(f"{model_name}.answer takes choices only for multiple choice, got choices={choices!r:.80}.")
    if text_pairs is None:
        return {"signature": "serving_default", "text": texts}
    if head == "pretrainer":
        raise ValueError(f"{model_name}.answer (fill-mask) takes single texts, got text_pairs={text_pairs!r:.80}.")
    return {"signature": "serve_text_pair", "text": texts, "text_pair": text_pairs}


def answer(model: Any, texts: Texts, text_pairs: Optional[Texts] = None, *, choices=None,
           batch_size: int = DEFAULT_BATCH_SIZE, **settings) -> Union[Dict[str, Any], List[Dict[str, Any]]]:
    """What the model's SavedModel answers for raw texts, as rows (see `TaskModel.answer`).

    Args:
        model: an `AlbertPretrainer` (fill-mask) or a task model.
        texts: a string, or a list / NumPy array of strings (span QA: the
            questions; multiple choice: the contexts).
        text_pairs: the second texts, one per text (span QA: the contexts;
            classifier and tagging: pairs, packed [CLS] text [SEP] pair [SEP]).
        choices: multiple choice: one list of num_choices strings per text.
        batch_size: rows per call of the serving function.
        **settings: see `serving_functions`.

    Returns:
        One dict per text, the serving signature's outputs by name (strings
        as str, arrays as lists: `rest_predict`'s rows); a single dict when
        `texts` is one string.

    Raises:
        ValueError: inputs of different lengths, inputs the head does not
            take, a bad setting, or a model with no SentencePiece model.
    """
    single = isinstance(texts, (str, bytes))
    name = type(model).__name__
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    rows = _as_list(texts, "texts")
    pairs = None if text_pairs is None else _as_list(text_pairs, "text_pairs")
    inputs = _inputs(head_of(model), name, rows, pairs, None if choices is None else _as_list(choices, "choices"))
    signature = inputs.pop("signature")
    for key, values in inputs.items():
        if len(values) != len(rows):
            raise ValueError(f"{name}.answer got {len(rows)} texts but {len(values)} {key} values.")
    if not rows:
        return []
    function = serving_functions(model, **settings)[signature]
    answers = []
    for begin in range(0, len(rows), batch_size):
        batch = {key: tf.constant(values[begin:begin + batch_size], tf.string) for key, values in inputs.items()}
        outputs = {key: value.numpy() for key, value in function(**batch).items()}
        answers += [{key: _json_value(value) for key, value in row.items()} for row in _unpadded_rows(outputs)]
    return answers[0] if single else answers


def _unpadded_rows(outputs: Dict[str, np.ndarray]) -> List[Dict[str, np.ndarray]]:
    """The rows of a served batch without the batch's padding, so a row does not depend on its batch.

    A request is padded to its longest row: tagging's per-position outputs
    to the longest text (`input_mask` 0), fill-mask's per-mask outputs to the
    row with most masks (`masked_positions` -1). Each row keeps its own
    positions / masks only; other outputs are as served.
    """
    if "input_mask" in outputs and "tags" in outputs:
        lengths = outputs["input_mask"].sum(axis=1)
        width_of = outputs["input_mask"].shape
    elif "masked_positions" in outputs:
        lengths = (outputs["masked_positions"] >= 0).sum(axis=1)
        width_of = outputs["masked_positions"].shape
    else:
        lengths, width_of = None, None
    count = len(next(iter(outputs.values())))
    rows = []
    for i in range(count):
        row = {}
        for key, value in outputs.items():
            padded = lengths is not None and value.shape[:2] == width_of
            row[key] = np.asarray(value[i][:lengths[i]] if padded else value[i])
        rows.append(row)
    return rows
