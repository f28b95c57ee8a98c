"""Head names, which head a model is, and the builder of each head's serving module."""

from __future__ import annotations

from typing import Any, Optional

from albert_tf.export.base import _names, _num_outputs
from albert_tf.export.classifier import _ClassifierServing, _TaggingServing
from albert_tf.export.encoder import _EncoderServing, _PretrainerServing
from albert_tf.export.multiple_choice import _MultipleChoiceServing
from albert_tf.export.span_qa import _SpanQAServing

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


def _build_span_qa(model, pre, *, max_answer_length, **_):
    return _SpanQAServing(model, pre, "span_qa", max_answer_length)


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
