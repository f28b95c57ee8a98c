"""Resume from the newest checkpoint that reads: a corrupt latest one is named, and the previous one is used.

A checkpoint can be torn (power loss before the data reached the disk, a
partially copied `gs://` folder, a flipped bit): TensorFlow then reports a
`DataLossError` ("Checksum does not match") or cannot read its index. The
training binaries keep several checkpoints (`--keep_checkpoint_max`, and the
last two of a fine-tuning run's resume state), so a resume goes back to the
newest one that reads, with a WARNING line naming the one that did not.

Example:

>>> import tempfile, tensorflow as tf
>>> folder = tempfile.mkdtemp()
>>> v = tf.Variable(1.0)
>>> manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=v), folder, max_to_keep=2)
>>> first, second = manager.save(1), manager.save(2)
>>> [os.path.basename(p) for p in checkpoints_newest_first(folder)]
['ckpt-2', 'ckpt-1']
>>> def restore(path):
...     if path.endswith("ckpt-2"):
...         raise tf.errors.DataLossError(None, None, "Checksum does not match")
>>> os.path.basename(restore_newest_readable(restore, folder))
'ckpt-1'
"""

from __future__ import annotations

import os
from typing import Callable, List, Optional

import tensorflow as tf
from absl import logging


class UnreadableCheckpoints(ValueError):
    """No checkpoint of a folder can be read (the message names each one and why)."""


def checkpoints_newest_first(directory: str) -> List[str]:
    """The checkpoints the folder's `checkpoint` file lists: the latest, then the others newest first."""
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return []
    paths = [state.model_checkpoint_path] if state.model_checkpoint_path else []
    for path in reversed(list(state.all_model_checkpoint_paths)):
        if path not in paths:
            paths.append(path)
    return paths  # TensorFlow has joined a relative name with `directory` already


def reason(error: BaseException) -> str:
    """What went wrong reading a checkpoint, on one line (no op-wrapper prefix)."""
    text = " ".join(str(getattr(error, "message", None) or error).split())
    if text.startswith("{{function_node"):
        text = text.split("}} ", 1)[-1]
    return text.replace(" [Op:RestoreV2]", "")


def restore_newest_readable(restore: Callable[[str], None], directory: str) -> Optional[str]:
    """Restores the newest checkpoint of `directory` that reads; logs a WARNING for each newer one that does not.

    Args:
        restore: restores everything from one checkpoint path; raises a
            `tf.errors.OpError` when the files cannot be read. A later call
            must overwrite everything an earlier, failed one may have set.
        directory: the folder whose `checkpoint` file lists the checkpoints.

    Returns:
        The path restored, or None when the folder lists no checkpoint.

    Raises:
        UnreadableCheckpoints: (one line) every listed checkpoint fails,
            naming each and why.
    """
    failed = []
    for path in checkpoints_newest_first(directory):
        try:
            restore(path)
        except tf.errors.OpError as error:
            failed.append(f"{path} ({reason(error)})")
            continue
        if failed:
            logging.warning("The latest checkpoint cannot be read: %s. Resuming from the previous complete "
                            "checkpoint %s instead.", "; ".join(failed), path)
        return path
    if failed:
        raise UnreadableCheckpoints(
            f"No checkpoint in {directory} can be read: {'; '.join(failed)}. Restore the folder from a copy, "
            "or move them away (with the folder's `checkpoint` file) to start over.")
    return None
