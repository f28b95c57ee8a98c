"""What a resumed fine-tuning run must share with the run that wrote its state.

`run_settings` lists the settings (data, model, schedule, optimizer, reader
options, the SentencePiece model's checksum); `check_run_state` refuses, in
one line naming each difference, a run of other settings in a folder whose
output_dir/finetune_run.json holds a run's settings, and `record_run_state`
writes them. The runner records them once its first training step is done
(`albert_tf.tasks.callbacks.RecordRunSettings`), so a run that fails before
it (a bad checkpoint, a model that does not build) binds nothing: a rerun
with other settings is taken. A state written by an earlier version (without
settings added since) still resumes.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict

if TYPE_CHECKING:
    from albert_tf.tasks.base import FinetuneTask
    from albert_tf.tasks.runner import FinetuneOptions

RUN_STATE_FILE = "finetune_run.json"


def run_settings(options: FinetuneOptions, task: FinetuneTask, schedule: Dict[str, int],
                 precision: str) -> Dict[str, Any]:
    """What a resumed run must share with the run that wrote the state: the
    data, model, schedule, optimizer and every reader setting of the task."""
    from pipelines.fileio import absolute

    o, t = options, options.task_options
    state = {"task": task.name, "data_dir": absolute(o.data_dir), "init_checkpoint": o.init_checkpoint,
             "albert_config_file": o.albert_config_file, "train_batch_size": o.train_batch_size,
             "learning_rate": o.learning_rate, "seed": o.seed, "layerwise_lr_decay": o.layerwise_lr_decay,
             "weight_decay_rate": o.weight_decay_rate, "dropout": t.dropout_rate,
             "do_lower_case": t.do_lower_case, "max_seq_length": t.max_seq_length,
             "mixed_precision": precision, **schedule}
    if task.name.startswith("squad"):
        state.update(doc_stride=t.doc_stride, max_query_length=t.max_query_length)
    elif task.name == "race":
        state["max_qa_length"] = t.max_qa_length
    else:  # classification and tagging; length buckets set the data order
        state["length_buckets"] = t.length_buckets
        if task.name == "csv":
            state.update(text_column=t.text_column, text_b_column=t.text_b_column,
                         label_column=t.label_column, regression=t.regression)
    if t.static_shapes:  # full batches only: another data order (recorded only when on, as older runs lack it)
        state["static_shapes"] = True
    for name in ("optimizer", "adam_epsilon", "pooling"):  # when this version has them
        for holder in (o, t):
            if hasattr(holder, name):
                state[name] = getattr(holder, name)
    state["adam_epsilon"] = resolved_adam_epsilon(o)  # an explicit default equals the default
    # Another vocabulary of the same size would train on other ids: its checksum is part of the run.
    state["spm_model_sha256"] = file_sha256(t.spm_model_file) if t.spm_model_file else None
    return state


def resolved_adam_epsilon(options: FinetuneOptions) -> float:
    """--adam_epsilon, or the default of --optimizer when it is not given.

    Example:
    >>> from albert_tf.tasks.runner import FinetuneOptions
    >>> resolved_adam_epsilon(FinetuneOptions("csv", "d", "o")), resolved_adam_epsilon(
    ...     FinetuneOptions("csv", "d", "o", optimizer="adamw_original", adam_epsilon=1e-7))
    (1e-08, 1e-07)
    """
    from albert_tf.optimizers import DEFAULT_EPSILON

    if options.adam_epsilon is not None:
        return float(options.adam_epsilon)
    return float(DEFAULT_EPSILON[options.optimizer != "adamw_original"])


def file_sha256(path: str) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB blocks; works on gs:// paths through tf.io.gfile).

    Args:
        path: the file.
    """
    import hashlib

    import tensorflow as tf

    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# Settings that earlier versions did not record: a run state without them still resumes.
SETTINGS_ADDED_LATER = ("spm_model_sha256",)


def _upgraded_run_state(previous: Dict[str, Any]) -> Dict[str, Any]:
    """An earlier version's run state in today's terms: it recorded ``adam_epsilon`` as given (None: the default)."""
    from albert_tf.optimizers import DEFAULT_EPSILON

    if "adam_epsilon" in previous and previous["adam_epsilon"] is None:
        previous = {**previous,
                    "adam_epsilon": float(DEFAULT_EPSILON[previous.get("optimizer") != "adamw_original"])}
    return previous


def check_run_state(options: FinetuneOptions, state: Dict[str, Any], record: bool = True) -> None:
    """Refuses to resume a run of other settings in the same output_dir.

    Args:
        options: the run's options (its output_dir).
        state: `run_settings` of this run.
        record: also record `state` when the folder holds none (`record_run_state`); the runner passes
            False and records once the first step is done.

    Raises:
        ValueError: the folder holds a run of other settings (one line naming each difference).
    """
    import tensorflow as tf  # gfile: the output folder may be gs://

    from pipelines.fileio import read_json

    path = os.path.join(options.output_dir, RUN_STATE_FILE)
    if not tf.io.gfile.exists(path):
        if record:
            record_run_state(options, state)
        return
    previous = _upgraded_run_state(read_json(path))
    keys = sorted(set(state) | set(previous))
    diff = {k: (previous.get(k), state.get(k)) for k in keys if previous.get(k) != state.get(k)
            and not (k in SETTINGS_ADDED_LATER and k not in previous)}
    if diff:
        raise ValueError(
            f"--output_dir={options.output_dir!r} holds a fine-tuning run with other settings "
            f"({', '.join(f'{k}: {a!r} there, {b!r} now' for k, (a, b) in sorted(diff.items()))}); "
            "use a new --output_dir or the same flags to resume.")


def record_run_state(options: FinetuneOptions, state: Dict[str, Any]) -> bool:
    """Writes this run's settings to output_dir/finetune_run.json unless the folder holds some already.

    Args:
        options: the run's options (its output_dir).
        state: `run_settings` of this run.

    Returns:
        True when this call wrote them.
    """
    import tensorflow as tf

    from pipelines.fileio import atomic_write

    path = os.path.join(options.output_dir, RUN_STATE_FILE)
    if tf.io.gfile.exists(path):
        return False
    with atomic_write(path, "w") as f:
        json.dump(state, f, indent=1, sort_keys=True)
    return True
