"""Names and small writers shared by the pieces of the training package."""

from __future__ import annotations

from typing import Any, Callable, Dict

import tensorflow as tf

from pipelines.fileio import atomic_write

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]

EVAL_RESULTS_FILENAME = "eval_results.txt"
CHECKPOINT_NAME = "ckpt"
# The settings a checkpoint's step count and data position mean (see
# `state.check_run_settings`), written beside the checkpoints.
RUN_SETTINGS_FILENAME = "training_settings.json"


class TrainingError(RuntimeError):
    """Training stopped: NaN loss, bad input data or an inconsistent output_dir."""


def write_eval_results(path: str, results: Dict[str, Any]) -> None:
    """Writes ``key = value`` lines, sorted, as the original's eval_results.txt.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "eval_results.txt")
    >>> write_eval_results(path, {"loss": 1.5, "global_step": 4})
    >>> from pipelines.fileio import read_text
    >>> read_text(path)
    'global_step = 4\\nloss = 1.5\\n'
    """
    with atomic_write(path) as f:
        for key in sorted(results):
            f.write(f"{key} = {results[key]}\n")


def write_scalar_summary(name: str, value: float) -> None:
    """A TensorBoard scalar through the default writer and step.

    `tf.summary.scalar` needs the tensorboard package, which TensorFlow 2.21
    does not install; this writes the same record (the "scalars" plugin tag)
    with core ops only.
    """
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(name, tf.constant(float(value), tf.float32),
                     metadata=metadata.SerializeToString())
