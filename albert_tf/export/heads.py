"""Head names, which head a model is, and the builder of each head's serving module."""

from __future__ import annotations

from typing import Any, Optional

from albert_tf.export.base import _names, _num_outputs, _task_config
from albert_tf.export.classifier import _ClassifierServing, _TaggingServing
from albert_tf.export.encoder import _EncoderServing, _PretrainerServing
from albert_tf.export.multiple_choice import _MultipleChoiceServing
from albert_tf.export.span_qa import _SpanQAServing

# Span QA serving defaults: the reader's --doc_stride default, and the context
# pieces served (32 windows of 128 new pieces at max_seq_length 384).
DEFAULT_DOC_STRIDE = 128
DEFAULT_MAX_CONTEXT_LENGTH = 4096
# The fine-tuning flag's default (models saved before task_config.json kept max_answer_length).
DEFAULT_MAX_ANSWER_LENGTH = 30
# The fine-tuning flag's default too (models saved before task_config.json kept n_best_size).
DEFAULT_N_BEST_SIZE = 20

HEADS = ("encoder", "pretrainer", "classifier", "span_qa", "multiple_choice", "tagging")
# Task-model class name -> head name (the classes live in albert_tf.models).
_TASK_CLASSES = {
    "AlbertClassifier": "classifier",
    "AlbertSpanQA": "span_qa",
    "AlbertMultipleChoice": "multiple_choice",
    "AlbertTokenClassifier": "tagging",
}


def head_of(model: Any) -> str:
    """The export head of a model, from its class (see HEADS)."""
    from albert_tf.models.encoder import AlbertEncoder
    from albert_tf.models.pretrainer import AlbertPretrainer

    if isinstance(model, AlbertPretrainer):
        return "pretrainer"
    if isinstance(model, AlbertEncoder):
        return "encoder"
    for cls in type(model).__mro__:
        if cls.__name__ in _TASK_CLASSES:
            return _TASK_CLASSES[cls.__name__]
    raise ValueError(
        f"Cannot export a {type(model).__name__}: expected an AlbertEncoder, AlbertPretrainer or one of "
        f"{sorted(_TASK_CLASSES)}."
    )


def _resolve_head(model: Any, head: Optional[str]) -> str:
    inferred = head_of(model)
    if head is None:
        return inferred
    if head not in HEADS:
        raise ValueError(f"head must be one of {HEADS}, got {head!r}.")
    if head != inferred:
        raise ValueError(f"head={head!r} does not match the model, a {type(model).__name__} (head {inferred!r}).")
    return head


def _build_encoder(model, pre, **_):
    return _EncoderServing(model, pre, "encoder")


def _build_pretrainer(model, pre, *, top_k, **_):
    return _PretrainerServing(model, pre, "pretrainer", top_k)


def _build_classifier(model, pre, *, label_names, **_):
    count = _num_outputs(model, "num_classes", "num_classes")
    return _ClassifierServing(model, pre, "classifier",
                              _names(model, label_names, "label_names", "label_names", count, "label"))


def _span_qa_setting(model, given, key: str, default):
    """An export argument, else the model's (task_config.json), else the default."""
    if given is not None:
        return given
    value = getattr(model, key, None)
    if value is None:
        value = _task_config(model).get(key)
    return default if value is None else value


def _build_span_qa(model, pre, *, max_answer_length=None, doc_stride=None, max_context_length=None,
                   null_score_diff_threshold=None, n_best_size=None, **_):
    doc_stride = int(_span_qa_setting(model, doc_stride, "doc_stride", DEFAULT_DOC_STRIDE))
    max_answer_length = int(_span_qa_setting(model, max_answer_length, "max_answer_length",
                                             DEFAULT_MAX_ANSWER_LENGTH))
    max_context_length = int(max_context_length or DEFAULT_MAX_CONTEXT_LENGTH)
    threshold = float(_span_qa_setting(model, null_score_diff_threshold, "null_score_diff_threshold", 0.0))
    n_best_size = int(_span_qa_setting(model, n_best_size, "n_best_size", DEFAULT_N_BEST_SIZE))
    for name, value in (("doc_stride", doc_stride), ("max_context_length", max_context_length),
                        ("max_answer_length", max_answer_length), ("n_best_size", n_best_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}.")
    return _SpanQAServing(model, pre, "span_qa", max_answer_length, doc_stride, max_context_length, threshold,
                          n_best_size)


def _build_multiple_choice(model, pre, **_):
    return _MultipleChoiceServing(model, pre, "multiple_choice", _num_outputs(model, "num_choices", "num_choices"))


def _build_tagging(model, pre, *, label_names, **_):
    count = _num_outputs(model, "num_tags", "num_tags")
    return _TaggingServing(model, pre, "tagging", _names(model, label_names, "tag_names", "tag_names", count, "tag"))


_HEAD_BUILDERS = {
    "encoder": _build_encoder,
    "pretrainer": _build_pretrainer,
    "classifier": _build_classifier,
    "span_qa": _build_span_qa,
    "multiple_choice": _build_multiple_choice,
    "tagging": _build_tagging,
}
