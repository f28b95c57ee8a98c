"""One-line messages for faults of the machine, not of the user's flags.

`run_binary` (albert_tf/bin/common.py) asks `fault_message` first for every
error a binary ends with:

* **a full disk** (`No space left on device` from Python or from a TensorFlow
  op such as SaveV2): the folder being written and what is complete in it:
  the last complete checkpoint (the one the `checkpoint` state file names: a
  checkpoint being written is a `ckpt-N_temp` folder until TensorFlow renames
  it; a fine-tuning run's are in its resume/ subfolder), a complete fine-tuned
  model (`save_task_model` writes task_config.json last), the complete shards
  (a shard being written is a hidden `.NAME.incomplete` file until renamed) or
  the last complete export version (an export is written in a hidden `.tmp-*`
  folder and renamed).  Evaluation and prediction files are written under a
  temporary name and renamed (`pipelines.fileio.atomic_write`), so none is
  partial.  The next run on a bigger disk resumes from there.
* **a corrupt checkpoint** (its data's checksum, or its index, does not read):
  named as a checkpoint with TensorFlow's reason (a resume falls back to the
  previous checkpoint by itself, `albert_tf.checkpoint_fallback`; this is what
  is left, e.g. `--checkpoint` of albert-export).
* **a corrupt or truncated TFRecord record** (tf.data's DataLossError says
  `corrupted record at 1989`, no file): the input file, the record's index and
  byte offset (`pipelines.shard_check.locate_corrupt_record`).

Example:

>>> disk_full(OSError(28, "No space left on device"))
True
>>> disk_full(ValueError("bad value"))
False
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from typing import List, Optional, Sequence

_NO_SPACE = "No space left on device"
_TASK_MODEL_FILES = ("model.weights.safetensors", "albert_config.json", "spm.model", "task_config.json")
_SHARD = re.compile(r"^[^.].*-\d{5,}-of-\d{5,}\.tfrecord(\.gz)?$")
# A path inside a TensorFlow message: from the first "/" (or scheme) to a quote, space or ";".
_PATH_IN_MESSAGE = re.compile(r"((?:[a-z]+://|/)[^\s;'\"]+)")


def _chain(error: Optional[BaseException]):
    """The error and those it was raised from or during (a failed close after a failed write)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def disk_full(error: BaseException) -> bool:
    """Whether the error is a full disk (errno ENOSPC, or TensorFlow's message for
    it), itself or an error it was raised during."""
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno == errno.ENOSPC:
            return True
        if _NO_SPACE in str(link):
            return True
    return False


def _message(error: BaseException) -> str:
    return str(getattr(error, "message", None) or error)


def _folder_written(error: BaseException, candidates: Sequence[str]) -> Optional[str]:
    """The candidate output folder that a path in the message lies in (else the first)."""
    paths = []
    for link in _chain(error):
        if getattr(link, "filename", None):
            paths.append(str(link.filename))
        paths.extend(_PATH_IN_MESSAGE.findall(_message(link)))
    for folder in candidates:
        from pipelines.fileio import absolute  # a URL as given, a local folder made absolute

        root = absolute(folder)
        for path in paths:
            if path.startswith(root.rstrip("/") + "/") or path == root:
                return folder
    return candidates[0] if candidates else None


def last_complete_checkpoint(folder: str) -> Optional[str]:
    """The newest checkpoint the `checkpoint` state file of `folder` names
    whose index file exists (what a resumed run restores), else None."""
    import tensorflow as tf

    try:
        state = tf.train.get_checkpoint_state(folder)
    except (tf.errors.OpError, ValueError):
        return None
    if state is None:
        return None
    for path in reversed(list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]):
        # TensorFlow joins a relative name with `folder` already (itself relative or not).
        candidates = [path]
        if not os.path.isabs(path) and "://" not in path:
            candidates.append(os.path.join(folder, path))
        for candidate in candidates:
            if tf.io.gfile.exists(candidate + ".index"):
                return candidate
    return None


def complete_task_model(folder: str) -> bool:
    """Whether `folder` holds a whole fine-tuned model: `save_task_model` writes
    task_config.json last, after the weights, config and SentencePiece model."""
    import tensorflow as tf

    return all(tf.io.gfile.exists(os.path.join(folder, name)) for name in _TASK_MODEL_FILES)


def complete_outputs(folder: str) -> List[str]:
    """What is complete in `folder`, one phrase each: the last checkpoint, a
    fine-tuned model, the shards, the last export version (empty when nothing is)."""
    import tensorflow as tf

    found = []
    checkpoint = last_complete_checkpoint(folder)
    if checkpoint:
        found.append(f"last complete checkpoint {checkpoint}")
    if complete_task_model(folder):
        found.append(f"the fine-tuned model in {folder} is complete")
    try:
        names = sorted(tf.io.gfile.listdir(folder))
    except tf.errors.OpError:
        return found
    for name in names:  # a fine-tuning run keeps its checkpoints in a subfolder
        sub = os.path.join(folder, name.rstrip("/"))
        if not name.startswith(".") and tf.io.gfile.exists(os.path.join(sub, "checkpoint")):
            checkpoint = last_complete_checkpoint(sub)
            if checkpoint:
                found.append(f"last complete checkpoint {checkpoint}")
    shards = [n for n in names if _SHARD.match(n)]
    if shards:
        found.append(f"{len(shards)} complete shard(s), the last {os.path.join(folder, shards[-1])}")
    versions = sorted((int(n.rstrip("/")) for n in names if n.rstrip("/").isdigit()
                       and tf.io.gfile.exists(os.path.join(folder, n.rstrip("/"), "saved_model.pb"))))
    if versions:
        found.append(f"last complete export {os.path.join(folder, str(versions[-1]))}")
    return found


def disk_full_message(error: BaseException, output_dirs: Sequence[str]) -> str:
    """"No space left on device in FOLDER (N MB free); last complete ...: ..."."""
    folder = _folder_written(error, [d for d in output_dirs if d])
    if folder is None:
        return f"{_NO_SPACE}: free some space and run the same command again."
    free = ""
    if "://" not in folder and os.path.isdir(folder):
        free = f" ({shutil.disk_usage(folder).free / 1e6:.1f} MB free)"
    complete = complete_outputs(folder)
    done = "; ".join(complete) if complete else "nothing complete there yet"
    return (f"{_NO_SPACE} while writing to {folder}{free}: {done}. Free some space (or choose "
            "another folder) and run the same command again: it goes on from there.")


def corrupt_record_message(error: BaseException, input_files: Sequence[str]) -> str:
    """The DataLossError with the file, record and offset it comes from."""
    from pipelines import shard_check

    text = _message(error)
    located = shard_check.locate_corrupt_record(text, input_files)
    if located:
        return (f"Corrupt input data: {located}. Delete that shard and recreate it, or pass "
                "--skip_corrupt_records to read on without the rest of its file.")
    reason = next((line.strip().rstrip("'") for line in text.splitlines()
                   if "record at" in line), "a corrupt record")
    return (f"Corrupt input data: {reason} in one of {len(input_files)} input file(s); "
            "--verify_shards=full names a changed shard, --skip_corrupt_records reads on.")


# TensorFlow's words for a checkpoint it cannot read: its data ("TensorBundle at PREFIX shard 0 ...:
# Checksum does not match") or its index ("Unable to read file (PREFIX.index) ...").
_CHECKPOINT_IN_MESSAGE = (re.compile(r"TensorBundle at (\S+) shard"),
                          re.compile(r"Unable to read file \((\S+)\.index\)"))


def corrupt_checkpoint_message(error: BaseException) -> Optional[str]:
    """A checkpoint TensorFlow cannot read, named as a checkpoint (not as input data); None for other errors."""
    from albert_tf.checkpoint_fallback import reason

    text = _message(error)
    for pattern in _CHECKPOINT_IN_MESSAGE:
        found = pattern.search(text)
        if found:
            return (f"Corrupt checkpoint {found.group(1)}: {reason(error)}. Restore it from a copy, or move it "
                    "away and take an earlier checkpoint of its folder.")
    return None


def _glob_flags(flag_values, names: Sequence[str]) -> List[str]:
    import tensorflow as tf

    files: List[str] = []
    for name in names:
        value = getattr(flag_values, name, None) if name in flag_values else None
        for pattern in (value or "").split(","):
            if pattern.strip():
                files.extend(f for f in sorted(tf.io.gfile.glob(pattern.strip()))
                             if f not in files and not os.path.basename(f).startswith("."))
    return files


def fault_message(error: BaseException, flag_values) -> Optional[str]:
    """The one-line message of a machine fault, or None for other errors.

    Args:
        error: what the binary's main raised.
        flag_values: the parsed flags (output_dir, export_dir, input_file,
            eval_input_file are looked up where the binary defines them).
    """
    tf = sys.modules.get("tensorflow")
    if disk_full(error):
        dirs = [getattr(flag_values, n) for n in ("output_dir", "export_dir", "export_base_dir")
                if n in flag_values and getattr(flag_values, n)]
        return disk_full_message(error, dirs)
    checkpoint = corrupt_checkpoint_message(error) if tf is not None else None
    if checkpoint:
        return checkpoint
    if tf is not None and isinstance(error, tf.errors.DataLossError):
        return corrupt_record_message(error, _glob_flags(flag_values, ("input_file", "eval_input_file")))
    return None
