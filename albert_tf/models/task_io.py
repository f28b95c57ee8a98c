"""Saving and loading fine-tuned task models as one self-contained folder.

`save_task_model` writes:
- albert_config.json: the encoder's config (the original's JSON);
- model.weights.safetensors: the encoder under the original checkpoint names
  (`bert/...`, so `albert_tf.load_checkpoint` reads the folder as a pretrained
  encoder, reporting the head weights as unused) plus the head's weights under
  the names of `model.head_variable_map()`;
- task_config.json: task type, sizes, label/tag names, max_seq_length,
  do_lower_case and the head's other arguments;
- spm.model: the SentencePiece model.

`load_task_model` rebuilds the model, its preprocessor and every weight.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from pipelines.fileio import atomic_copy, atomic_write

TASK_CONFIG_FILENAME = "task_config.json"


def _task_classes() -> dict:
    from albert_tf.models.classifier import AlbertClassifier
    from albert_tf.models.multiple_choice import AlbertMultipleChoice
    from albert_tf.models.span_qa import AlbertSpanQA
    from albert_tf.models.token_classifier import AlbertTokenClassifier

    return {cls.task_type: cls for cls in (AlbertClassifier, AlbertSpanQA, AlbertMultipleChoice,
                                           AlbertTokenClassifier)}


def task_variable_map(model) -> dict:
    """Saved name -> variable for every weight of a task model."""
    from albert_tf.checkpoints import encoder_variable_map

    names = dict(encoder_variable_map(model.encoder))
    head = model.head_variable_map()
    clash = sorted(set(names) & set(head))
    if clash:
        raise ValueError(f"Head weight names clash with encoder names: {clash}.")
    names.update(head)
    return names


def save_task_model(model, output_dir: str, spm_model_file: Optional[str] = None) -> str:
    """Writes a task model as a folder that `load_task_model` (and
    `load_checkpoint`, for the encoder) reads.

    Args:
        model: a task model (AlbertClassifier, AlbertSpanQA,
            AlbertMultipleChoice, AlbertTokenClassifier).
        output_dir: the folder (created if needed); files are written under
            temporary names and renamed.
        spm_model_file: the SentencePiece model to copy as spm.model; by
            default the model's preprocessor's.

    Returns:
        output_dir.

    Example:
    >>> albert_tf.save_task_model(clf, "/tmp/sst2_model")  # doctest: +SKIP
    """
    from safetensors.numpy import save

    from albert_tf.checkpoints import CONFIG_FILENAME, SPM_MODEL_FILENAME, WEIGHTS_FILENAME, sorted_metadata

    if not hasattr(model, "head_variable_map"):
        raise TypeError(f"save_task_model needs a task model, got {type(model).__name__}; "
                        "use albert_tf.save_pretrained for a pretrainer.")
    tf.io.gfile.makedirs(output_dir)
    # task_config.json last: a folder that has it holds a whole model (a full
    # disk that stops the save earlier leaves none; albert_tf/bin/faults.py).
    spm_path = os.path.join(output_dir, SPM_MODEL_FILENAME)
    if spm_model_file:
        atomic_copy(spm_model_file, spm_path)
    elif model.preprocessor is not None:
        with atomic_write(spm_path, "wb") as f:
            f.write(model.preprocessor.spm_model_proto)
    arrays = {name: np.asarray(var.numpy()) for name, var in task_variable_map(model).items()}
    # safetensors' save_file writes local paths only: serialize, then write through gfile.
    with atomic_write(os.path.join(output_dir, WEIGHTS_FILENAME), "wb") as f:
        f.write(sorted_metadata(save(arrays, metadata={"format": "albert-tf", "task_type": model.task_type,
                                                       "sharing": model.config.sharing})))
    with atomic_write(os.path.join(output_dir, CONFIG_FILENAME)) as f:
        f.write(model.config.to_json_string())
    with atomic_write(os.path.join(output_dir, TASK_CONFIG_FILENAME)) as f:
        json.dump(model.task_config, f, indent=2, sort_keys=True)
        f.write("\n")
    return output_dir


def load_task_model(path: str, dtype=None):
    """Rebuilds a task model saved by `save_task_model`, preprocessor included.

    Args:
        path: the folder.
        dtype: optional Keras dtype policy, e.g. "mixed_bfloat16".

    Returns:
        The task model with every weight restored.

    Example:
    >>> clf = albert_tf.load_task_model("/tmp/sst2_model")  # doctest: +SKIP
    >>> clf.predict(["a fine film"])  # doctest: +SKIP
    """
    from safetensors.numpy import load

    from albert_tf.checkpoints import CONFIG_FILENAME, SPM_MODEL_FILENAME, WEIGHTS_FILENAME
    from pipelines.fileio import read_bytes, read_json

    task_path = os.path.join(path, TASK_CONFIG_FILENAME)
    if not tf.io.gfile.exists(task_path):
        raise FileNotFoundError(f"No {TASK_CONFIG_FILENAME} in {path!r}: not a folder written by "
                                "save_task_model (albert_tf.load_checkpoint reads pretrained models).")
    task = read_json(task_path)
    classes = _task_classes()
    task_type = task.pop("task_type", None)
    if task_type not in classes:
        raise ValueError(f"{task_path}: unknown task_type {task_type!r}; expected one of {sorted(classes)}.")
    config = AlbertConfig.from_json_file(os.path.join(path, CONFIG_FILENAME))
    max_seq_length = task.pop("max_seq_length", None) or 128
    do_lower_case = task.pop("do_lower_case", None)
    normalization = task.pop("normalization", None) or "original"  # models saved before the key: the default
    spm_path = os.path.join(path, SPM_MODEL_FILENAME)
    preprocessor = None
    if tf.io.gfile.exists(spm_path):
        preprocessor = AlbertTextPreprocessor(spm_path, max_seq_length=max_seq_length,
                                              do_lower_case=True if do_lower_case is None else do_lower_case,
                                              normalization=normalization)
    cls = classes[task_type]
    kwargs = {k: v for k, v in task.items() if k in cls.init_arguments}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = cls(config, preprocessor=preprocessor, **kwargs)
    weights_path = os.path.join(path, WEIGHTS_FILENAME)
    values = load(read_bytes(weights_path))  # load_file reads local paths only
    targets = task_variable_map(model)
    missing = sorted(set(targets) - set(values))
    if missing:
        raise ValueError(f"{weights_path} lacks {len(missing)} weight(s) of the {task_type} model, e.g. "
                         f"{missing[:5]}; does task_config.json match the weights?")
    bad = [f"{n}: file {values[n].shape} vs model {tuple(v.shape)}" for n, v in targets.items()
           if tuple(values[n].shape) != tuple(v.shape)]
    if bad:
        raise ValueError(f"Shapes in {weights_path} do not match {TASK_CONFIG_FILENAME}/{CONFIG_FILENAME}:\n  "
                         + "\n  ".join(bad))
    for name, var in targets.items():
        var.assign(np.asarray(values[name], dtype=var.dtype))
    return model
