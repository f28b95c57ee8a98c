"""TF Serving's REST row format, answered in this process (to check an export without a server)."""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping

import numpy as np
import tensorflow as tf


def rest_inputs(body: Mapping[str, Any], input_specs: Mapping[str, tf.TensorSpec]) -> Dict[str, tf.Tensor]:
    """A TF Serving REST predict body (row format) -> batched input tensors.

    `{"instances": [{"text": "a"}, {"text": "b"}]}` gives {"text": ["a", "b"]};
    bare values (`{"instances": ["a", "b"]}`) are allowed when the signature
    has one input, as in TF Serving.

    Args:
        body: the request body ("instances", optional "signature_name").
        input_specs: the signature's inputs (name -> TensorSpec).

    Raises:
        ValueError: naming the instance keys that do not match the inputs.

    Example:
    >>> spec = {"text": tf.TensorSpec([None], tf.string)}
    >>> rest_inputs({"instances": ["a", "b"]}, spec)["text"].numpy().tolist()
    [b'a', b'b']
    """
    unknown = sorted(set(body) - {"instances", "signature_name"})
    if unknown or not isinstance(body.get("instances"), list) or not body["instances"]:
        raise ValueError(f"A predict body needs a non-empty 'instances' list (row format); got keys {sorted(body)}.")
    instances = body["instances"]
    if all(isinstance(row, Mapping) for row in instances):
        for i, row in enumerate(instances):
            if set(row) != set(input_specs):
                raise ValueError(f"instances[{i}] has keys {sorted(row)}; the signature's inputs are "
                                 f"{sorted(input_specs)}.")
        columns = {name: [row[name] for row in instances] for name in input_specs}
    elif len(input_specs) == 1:
        columns = {next(iter(input_specs)): list(instances)}
    else:
        raise ValueError(f"Bare instances need a signature with one input; this one has {sorted(input_specs)}.")
    return {name: tf.constant(values, dtype=input_specs[name].dtype) for name, values in columns.items()}


def _json_value(array: np.ndarray):
    if array.dtype.kind in "SO":
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array).tolist()
    return array.tolist()


def rest_predict(saved_model: Any, body: Mapping[str, Any]) -> Dict[str, Any]:
    """Answers a TF Serving REST predict body with a SavedModel loaded here.

    Row format in and out, as TF Serving's REST API documents it: one
    prediction per instance, a dict of the signature's outputs (the bare value
    when it has a single output); strings decoded as UTF-8. For checking an
    export (and the demo) without a model server; it is not TF Serving.

    Args:
        saved_model: a SavedModel version folder, or what `tf.saved_model.load`
            returned for one.
        body: e.g. {"instances": [{"text": "..."}]}, with an optional
            "signature_name" (default "serving_default").

    Returns:
        {"predictions": [...]}.

    Example:
    >>> rest_predict("exports/sst2/1", {"instances": [{"text": "A fine film."}]})  # doctest: +SKIP
    {'predictions': [{'probabilities': [0.1, 0.9], 'label': 'positive', 'logits': [-1.1, 1.1]}]}
    """
    loaded = tf.saved_model.load(saved_model) if isinstance(saved_model, (str, os.PathLike)) else saved_model
    name = body.get("signature_name", "serving_default")
    if name not in loaded.signatures:
        raise ValueError(f"signature_name {name!r} is not in the SavedModel; it has {sorted(loaded.signatures)}.")
    fn = loaded.signatures[name]
    outputs = {key: value.numpy() for key, value in fn(**rest_inputs(body, fn.structured_input_signature[1])).items()}
    count = len(body["instances"])
    rows = [{key: _json_value(np.asarray(value[i])) for key, value in outputs.items()} for i in range(count)]
    if len(outputs) == 1:
        rows = [next(iter(row.values())) for row in rows]
    return {"predictions": rows}
