"""TF Serving warm-up requests: `assets.extra/tf_serving_warmup_requests`.

TF Serving replays the records of this file (a TFRecord file of
`tensorflow.serving.PredictionLog` protos) when it loads a version, before
the version takes traffic, so the first real request does not pay for the
graph's one-off work (kernel selection, oneDNN weight preparation, the
SentencePiece resources). `write_warmup_requests` writes one PredictRequest
per signature of the export (the text signatures and `serve_token_ids`), a
batch of two rows of different lengths each.

The records are built with the real protos of `tensorflow-serving-api`
(`pip install -e '.[serving]'` in the checkout). That package is not needed to export or
to load a SavedModel: without it the export writes no warm-up file and says
so in one log line. TensorFlow itself bundles no PredictionLog proto.

Example:

>>> write_warmup_requests("exports/sst2/.tmp-1", serving.signatures(), "sst2")  # doctest: +SKIP
'exports/sst2/.tmp-1/assets.extra/tf_serving_warmup_requests'
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Mapping, Optional

import numpy as np
import tensorflow as tf

WARMUP_DIR = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
# Two rows of different lengths: the batch pads, as a server's batches do. A
# literal [MASK] exercises the fill-mask path; other heads read it as text.
WARMUP_TEXTS = ("A short warm-up request.",
                "A second warm-up text, longer than the first, with a [MASK] in it.")
# serve_token_ids: [CLS] [MASK] [SEP] and [CLS] [MASK] [MASK] [SEP] (ids as the original's).
WARMUP_IDS = ((2, 4, 3, 0), (2, 4, 4, 3))

log = logging.getLogger(__name__)


def _string_input(spec: tf.TensorSpec) -> np.ndarray:
    """Texts of the spec's shape: [B] or [B, N] (N choices: fixed, else 2)."""
    shape = spec.shape.as_list()
    rows = np.array(WARMUP_TEXTS, dtype=object)
    if len(shape) == 1:
        return rows
    if len(shape) == 2:
        width = shape[1] or 2
        return np.array([[f"{text} Choice {j}." for j in range(width)] for text in WARMUP_TEXTS], dtype=object)
    raise ValueError(f"Warm-up texts for input {spec.name!r} of shape {shape}: expected rank 1 or 2.")


def _ids_input(name: str, spec: tf.TensorSpec) -> np.ndarray:
    """input_ids / input_mask / segment_ids of rank 2 ([B, T]) or 3 ([B, N, T])."""
    ids = np.array(WARMUP_IDS, dtype=spec.dtype.as_numpy_dtype)
    values = {"input_ids": ids, "input_mask": (ids != 0).astype(ids.dtype),
              "segment_ids": np.zeros_like(ids)}
    if name not in values:
        raise ValueError(f"No warm-up values for integer input {name!r}.")
    value = values[name]
    rank = len(spec.shape.as_list())
    if rank == 3:
        width = spec.shape.as_list()[1] or 2
        value = np.repeat(value[:, None, :], width, axis=1)
    elif rank != 2:
        raise ValueError(f"Warm-up ids for input {name!r} of rank {rank}: expected 2 or 3.")
    return value


def input_specs(signature: Any) -> Dict[str, tf.TensorSpec]:
    """Input name -> TensorSpec of a concrete function.

    A traced function lists positional specs (named by their `name`), a
    loaded signature keyword ones; the SavedModel names inputs the same way.
    """
    args, kwargs = signature.structured_input_signature
    specs = {spec.name: spec for spec in tf.nest.flatten(args)}
    specs.update(kwargs)
    if None in specs:
        raise ValueError(f"A signature input has no name: {signature.structured_input_signature}.")
    return specs


def warmup_inputs(signature: Any) -> Dict[str, np.ndarray]:
    """A batch of two requests' inputs for a concrete function, by input name.

    Args:
        signature: a concrete function (an export's signature): its
            `structured_input_signature` names the inputs and their specs.

    Returns:
        Input name -> NumPy array (object arrays of str for strings).
    """
    specs = input_specs(signature)
    inputs = {}
    for name, spec in sorted(specs.items()):
        if spec.dtype == tf.string:
            inputs[name] = _string_input(spec)
        elif spec.dtype.is_integer:
            inputs[name] = _ids_input(name, spec)
        else:
            raise ValueError(f"No warm-up values for input {name!r} of dtype {spec.dtype.name}.")
    return inputs


def _serving_protos():
    """(model_pb2, predict_pb2, prediction_log_pb2) of tensorflow-serving-api, or None."""
    try:
        from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2
    except ImportError:
        return None
    return model_pb2, predict_pb2, prediction_log_pb2


def write_warmup_requests(saved_dir: str, signatures: Mapping[str, Any],
                          model_name: str = "") -> Optional[str]:
    """Writes one PredictionLog per signature to saved_dir/assets.extra/.

    Args:
        saved_dir: the SavedModel folder (a version folder, or its temporary
            name while the export is written).
        signatures: signature name -> concrete function, as saved.
        model_name: `model_spec.name` of the requests (TF Serving's model
            name; the warm-up replays them whatever it is).

    Returns:
        The file written, or None when tensorflow-serving-api is not
        installed (logged).
    """
    protos = _serving_protos()
    if protos is None:
        log.info("No TF Serving warm-up file (assets.extra/%s): tensorflow-serving-api is not "
                 "installed (pip install -e '.[serving]' in the checkout).", WARMUP_FILE)
        return None
    model_pb2, predict_pb2, prediction_log_pb2 = protos
    folder = os.path.join(saved_dir, WARMUP_DIR)
    tf.io.gfile.makedirs(folder)
    path = os.path.join(folder, WARMUP_FILE)
    # serving_default first: the signature most requests use is warmed first.
    names = sorted(signatures, key=lambda n: (n != "serving_default", n))
    with tf.io.TFRecordWriter(path) as writer:
        for name in names:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=name))
            specs = input_specs(signatures[name])
            for key, value in warmup_inputs(signatures[name]).items():
                request.inputs[key].CopyFrom(tf.make_tensor_proto(value, dtype=specs[key].dtype))
            record = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(record.SerializeToString())
    return path
