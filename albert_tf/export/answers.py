"""Raw text in Python: a model answers as its SavedModel's `serving_default` does, from the same code.

`answer(model, text, ...)` builds the head's serving module (`albert_tf.export.heads`, the one
`export_saved_model` saves) around the model and calls its default text function: labels and
probabilities (classifier), answers with character offsets (span QA), one tag per word (tagging),
fill-mask candidates (pretrainer), embeddings (encoder). No SavedModel is written; the module and its
traced function are kept per model, so later calls reuse them.
"""

from __future__ import annotations

import types
from typing import Any, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

# The export settings `answer` takes (export_saved_model's arguments of the same names).
SETTINGS = ("spm_model_file", "max_seq_length", "top_k", "max_answer_length", "doc_stride",
            "null_score_diff_threshold", "n_best_size")


def _serving_cache(model) -> Dict[tuple, Any]:
    """{settings key: (serving module, its serving_default tf.function)}, kept on the model.

    A SimpleNamespace is not trackable, so it is never saved with the model. (A module-level
    WeakKeyDictionary would keep every model alive: its value, the serving module, holds the model.)
    """
    holder = model.__dict__.get("_answer_serving")
    if holder is None:
        holder = types.SimpleNamespace(by_key={})
        model._answer_serving = holder
    return holder.by_key


def _serving_function(model, settings: Dict[str, Any]):
    from albert_tf.export.base import has_tokenizer
    from albert_tf.export.heads import _HEAD_BUILDERS, _resolve_head
    from albert_tf.export.saved_model import _make_preprocessor

    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"answer takes no setting {unknown[0]}={settings[unknown[0]]!r}; it takes "
                         f"{', '.join(SETTINGS)}.")
    # Names set after a first call (clf.label_names = [...]) are served from the next one.
    names = tuple(tuple(getattr(model, attr, None) or ()) for attr in ("label_names", "tag_names"))
    key = (id(getattr(model, "preprocessor", None)), names, tuple(sorted(settings.items())))
    cache = _serving_cache(model)
    if key not in cache:
        head = _resolve_head(model, None)
        built, pre = _make_preprocessor(model, settings.get("spm_model_file"), settings.get("max_seq_length"), None)
        if not has_tokenizer(pre):
            raise pre.missing()
        serving = _HEAD_BUILDERS[head](built, pre, label_names=None, top_k=settings.get("top_k", 5),
                                       max_answer_length=settings.get("max_answer_length"),
                                       doc_stride=settings.get("doc_stride"), max_context_length=None,
                                       null_score_diff_threshold=settings.get("null_score_diff_threshold"),
                                       n_best_size=settings.get("n_best_size"))
        cache[key] = (serving, serving.text_functions()["serving_default"])
    return cache[key][1]


def _as_numpy(value: tf.Tensor) -> np.ndarray:
    array = value.numpy()
    if array.dtype.kind in "SO":  # tf.string: Python str
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array) if array.size else \
            array.astype(object)
    return array


def answer(model, text: Sequence[str], text_pair: Optional[Sequence[str]] = None,
           choices: Optional[Sequence[Sequence[str]]] = None, **settings) -> Dict[str, np.ndarray]:
    """The model's answers to raw texts, as its exported `serving_default` gives them.

    Args:
        model: a task model with a preprocessor (`AlbertClassifier`, `AlbertSpanQA`,
            `AlbertMultipleChoice`, `AlbertTokenClassifier`), or an `AlbertPretrainer` / `AlbertEncoder`
            whose preprocessor is given as `model.preprocessor`.
        text: the texts ([batch] strings): the question for span QA, the context for multiple choice.
        text_pair: span QA's contexts; a pair classifier's second texts (`text_pairs` True).
        choices: multiple choice: [batch, num_choices] strings.
        **settings: export settings (`export_saved_model`'s): spm_model_file (an encoder or pretrainer
            has none of its own), max_seq_length, top_k, max_answer_length, doc_stride,
            null_score_diff_threshold, n_best_size; default: the model's.

    Returns:
        Output name -> NumPy array, the SavedModel's outputs (strings as Python `str`): e.g.
        `label`/`probabilities`/`logits` (classifier), `answer`/`start_char`/`end_char` (span QA),
        `tags`/`pieces` (tagging), `top_k_pieces`/`top_k_scores` (pretrainer).

    Example:
    >>> out = albert_tf.export.answer(clf, ["a fine film"])  # doctest: +SKIP
    >>> out["label"][0]  # doctest: +SKIP
    'positive'
    """
    fn = _serving_function(model, settings)
    names = [spec.name for spec in fn.input_signature]
    given = {"text": text, "text_pair": text_pair, "choices": choices}
    missing = [name for name in names if given[name] is None]
    extra = [name for name, value in given.items() if value is not None and name not in names]
    if missing or extra:
        got = sorted(name for name, value in given.items() if value is not None)
        raise ValueError(f"A {type(model).__name__} answers {names}; got {got}.")
    outputs = fn(*[tf.constant(given[name], tf.string) for name in names])
    return {name: _as_numpy(value) for name, value in outputs.items()}
