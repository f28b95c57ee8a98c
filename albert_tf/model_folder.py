"""One rule to find the parts of a model folder: its weights, its config and its vocabulary.

Every binary (albert-finetune's --init_checkpoint, albert-export's --checkpoint,
albert-convert's --input) and `TaskModel.from_pretrained` find a folder's parts
here, so that the folders users start from work the same everywhere:

* a released google-research folder (``albert_base_v2.tar.gz``):
  ``albert_config.json``, ``30k-clean.model`` (+ ``.vocab``),
  ``model.ckpt-best.{index,data-00000-of-00001}`` and no ``checkpoint`` file;
* a Hugging Face folder: ``config.json``, ``spiece.model``, ``model.safetensors``;
* this project's folders: ``albert_config.json``, ``spm.model`` and
  ``model.weights.safetensors`` (`save_pretrained`, albert-convert,
  albert-finetune) or training checkpoints with a ``checkpoint`` state file
  (albert-pretrain).

The rules:

* **vocabulary**: ``spm.model``, ``30k-clean.model``, ``spiece.model`` (the
  first that exists), else the only ``*.model`` file; several other
  ``*.model`` files are ambiguous (an error naming them);
* **weights**: a path with ``.index`` beside it is a TF checkpoint prefix; in a
  folder, the safetensors file this project or Hugging Face writes
  (``model.weights.safetensors`` or ``model.safetensors``; both is ambiguous),
  else the checkpoint a ``checkpoint`` state file names, else the only TF
  checkpoint prefix (``model.ckpt-best.index`` -> ``model.ckpt-best``). A
  folder with both final weights and a ``checkpoint`` state file (a finished
  pretraining run continued with more steps) gives the newer: by the step the
  weights record against the checkpoint's, else by modification time; a tie
  that cannot be told apart is refused naming both;
* **config**: ``albert_config.json``, else Hugging Face's ``config.json``.

Every file test and listing goes through `tf.io.gfile`, so folders on gs:// or
ram:// resolve as local ones do. A prefix path (``albert_base/model.ckpt-best``)
finds its config and vocabulary in its folder.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional

import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig, json_object

# Names the SentencePiece model has in a model folder: ours, the original release's, Hugging Face's.
VOCABULARY_NAMES = ("spm.model", "30k-clean.model", "spiece.model")
CONFIG_NAME = "albert_config.json"
HF_CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.weights.safetensors"  # this project's
HF_WEIGHTS_NAME = "model.safetensors"
CHECKPOINT_STATE_NAME = "checkpoint"  # tf.train's state file naming the latest checkpoint
STEP_METADATA = "step"  # the training step `save_pretrained` records in model.weights.safetensors

# Values of `ModelFolder.weights_format`.
TF_CHECKPOINT = "tf_checkpoint"  # an original TF1 checkpoint or a training checkpoint of this project
ALBERT_TF = "albert_tf"  # model.weights.safetensors
HUGGING_FACE = "huggingface"  # model.safetensors


@dataclasses.dataclass(frozen=True)
class ModelFolder:
    """The parts of a model folder (`resolve_model_folder`).

    Attributes:
        folder: the folder (the given path, or the folder of a checkpoint prefix).
        weights: a TF checkpoint prefix or a safetensors file.
        weights_format: `TF_CHECKPOINT`, `ALBERT_TF` or `HUGGING_FACE`.
        config_file: ``albert_config.json`` or ``config.json``; None when the folder has neither.
        vocabulary: the SentencePiece model; None when the folder has none.
    """

    folder: str
    weights: str
    weights_format: str
    config_file: Optional[str]
    vocabulary: Optional[str]


def folder_of(path: str) -> str:
    """The folder a model path names: the path itself when it is a folder, else the folder of a prefix.

    Args:
        path: a folder or a checkpoint prefix such as ``albert_base/model.ckpt-best``.

    Example:
    >>> folder_of("albert_base/model.ckpt-best")
    'albert_base'
    """
    # A prefix with an .index file is never a folder: some file systems (ram://) call every prefix of a file name
    # a folder.
    if tf.io.gfile.isdir(path) and not tf.io.gfile.exists(path + ".index"):
        return path
    return os.path.dirname(path) or "."


def _listing(folder: str) -> List[str]:
    return sorted(tf.io.gfile.listdir(folder)) if tf.io.gfile.isdir(folder) else []


def find_vocabulary(path: str) -> Optional[str]:
    """The SentencePiece model of a model folder, or None when the folder has no ``*.model`` file.

    Args:
        path: a model folder or a checkpoint prefix (its folder is searched).

    Returns:
        ``spm.model``, ``30k-clean.model`` or ``spiece.model`` (the first that
        exists), else the only ``*.model`` file; None when there is none.

    Raises:
        ValueError: several ``*.model`` files and none of the known names (one line naming them).
    """
    folder = folder_of(path)
    for name in VOCABULARY_NAMES:
        candidate = os.path.join(folder, name)
        if tf.io.gfile.exists(candidate):
            return candidate
    found = [name for name in _listing(folder) if name.endswith(".model")]
    if len(found) > 1:
        raise ValueError(f"{folder!r} holds several SentencePiece models ({', '.join(found)}) and none of "
                         f"{', '.join(VOCABULARY_NAMES)}: name one with --spm_model_file.")
    return os.path.join(folder, found[0]) if found else None


def vocabulary_search_text(path: str) -> str:
    """What `find_vocabulary` looks for, for messages: the names and the folder.

    Args:
        path: the model folder or checkpoint prefix searched.

    Example:
    >>> vocabulary_search_text("albert_base/model.ckpt-best")
    "spm.model, 30k-clean.model, spiece.model or a single *.model file in 'albert_base'"
    """
    return f"{', '.join(VOCABULARY_NAMES)} or a single *.model file in {folder_of(path)!r}"


def require_vocabulary(path: str, remedy: str = "give --spm_model_file") -> str:
    """`find_vocabulary`, refusing in one line when the folder has none.

    Args:
        path: a model folder or a checkpoint prefix.
        remedy: what the user can do instead, for the message.

    Raises:
        FileNotFoundError: no SentencePiece model (the message names what was looked for and the folder).
    """
    found = find_vocabulary(path)
    if found is None:
        raise FileNotFoundError(f"No SentencePiece model: looked for {vocabulary_search_text(path)}; {remedy}.")
    return found


def _only_checkpoint_prefix(folder: str) -> Optional[str]:
    """The only TF checkpoint prefix (``NAME.index``) in the folder, None when there is none."""
    prefixes = [name[: -len(".index")] for name in _listing(folder) if name.endswith(".index")]
    if len(prefixes) > 1:
        raise ValueError(f"{folder!r} holds several TF checkpoints ({', '.join(prefixes)}) and no "
                         f"'{CHECKPOINT_STATE_NAME}' file naming one: give the prefix, e.g. "
                         f"{os.path.join(folder, prefixes[-1])!r}.")
    return os.path.join(folder, prefixes[0]) if prefixes else None


def find_weights(path: str) -> tuple:
    """The weights a model path names and their format.

    Args:
        path: a TF checkpoint prefix (``.index`` beside it) or a model folder.

    Returns:
        (weights, format): a TF checkpoint prefix and `TF_CHECKPOINT`, or a
        safetensors file and `ALBERT_TF` / `HUGGING_FACE`.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: the folder holds no weights this library reads, or several
            candidates (one line naming them).
    """
    if tf.io.gfile.exists(path + ".index"):  # a prefix (ram:// calls it a folder too: the .index decides)
        return path, TF_CHECKPOINT
    if not tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"Checkpoint path {path!r} does not exist (neither a folder nor a prefix with "
                                f"{path + '.index'!r}).")
    present = set(_listing(path))
    safetensors = [name for name in (WEIGHTS_NAME, HF_WEIGHTS_NAME) if name in present]
    if len(safetensors) == 2:
        raise ValueError(f"{path!r} holds both {WEIGHTS_NAME} and {HF_WEIGHTS_NAME}: keep one of them.")
    prefix = None
    if CHECKPOINT_STATE_NAME in present:
        prefix = tf.train.latest_checkpoint(path)
        if prefix is None and not safetensors:
            raise ValueError(f"{os.path.join(path, CHECKPOINT_STATE_NAME)!r} names no checkpoint that exists.")
    if safetensors:
        weights = os.path.join(path, safetensors[0])
        if prefix is not None and _checkpoint_is_newer(weights, prefix):
            return prefix, TF_CHECKPOINT
        return weights, (ALBERT_TF if safetensors[0] == WEIGHTS_NAME else HUGGING_FACE)
    if prefix is not None:
        return prefix, TF_CHECKPOINT
    prefix = _only_checkpoint_prefix(path)
    if prefix is None:
        raise ValueError(
            f"{path!r} holds no weights this library reads: looked for {WEIGHTS_NAME}, {HF_WEIGHTS_NAME}, a "
            f"'{CHECKPOINT_STATE_NAME}' file or a single TF checkpoint (NAME.index, e.g. model.ckpt-best.index).")
    return prefix, TF_CHECKPOINT


def recorded_step(weights: str) -> Optional[int]:
    """The training step a safetensors file's metadata records (`save_pretrained`), None when it records none.

    Args:
        weights: a ``.safetensors`` file (only its header is read, through `tf.io.gfile`).
    """
    import json

    with tf.io.gfile.GFile(weights, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        try:
            metadata = json.loads(f.read(size)).get("__metadata__") or {}
        except ValueError:
            return None
    step = metadata.get(STEP_METADATA)
    return int(step) if step is not None and str(step).isdigit() else None


def _checkpoint_step(prefix: str) -> Optional[int]:
    tail = prefix.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _checkpoint_is_newer(weights: str, prefix: str) -> bool:
    """Whether the training checkpoint `prefix` is newer than the final `weights` of the same folder.

    By the steps when both are known (equal: the weights, the run's end), else by modification time.

    Raises:
        ValueError: neither the steps nor the times tell them apart (one line naming both).
    """
    weights_step, checkpoint_step = recorded_step(weights), _checkpoint_step(prefix)
    if weights_step is not None and checkpoint_step is not None:
        newer = checkpoint_step > weights_step
        why = f"step {checkpoint_step} against step {weights_step}"
    else:
        weights_time = tf.io.gfile.stat(weights).mtime_nsec
        checkpoint_time = tf.io.gfile.stat(prefix + ".index").mtime_nsec
        if weights_time == checkpoint_time:
            raise ValueError(
                f"{os.path.dirname(weights)!r} holds {os.path.basename(weights)} and the training checkpoint "
                f"{os.path.basename(prefix)}, and neither a step nor a modification time tells which is newer: "
                f"give the prefix {prefix!r}, or remove one.")
        newer = checkpoint_time > weights_time
        why = "modification times"
    logging.info("%s holds final weights and training checkpoints: %s is the newer (%s).",
                 os.path.dirname(weights), prefix if newer else weights, why)
    return newer


def find_config(path: str) -> Optional[str]:
    """``albert_config.json``, else Hugging Face's ``config.json``, in the folder of a model path (None: neither).

    Args:
        path: a model folder or a checkpoint prefix.
    """
    folder = folder_of(path)
    for name in (CONFIG_NAME, HF_CONFIG_NAME):
        candidate = os.path.join(folder, name)
        if tf.io.gfile.exists(candidate):
            return candidate
    return None


def read_config(config_file: str) -> AlbertConfig:
    """An `AlbertConfig` from ``albert_config.json`` (the original's format) or a Hugging Face ``config.json``.

    Read with `tf.io.gfile`, so remote files work.

    Args:
        config_file: the JSON file; a file named ``config.json`` is read as Hugging Face's.

    Raises:
        ValueError: not JSON, not an object, or not an ALBERT config (the message names the file).
    """
    with tf.io.gfile.GFile(config_file, "r") as f:
        values = json_object(f.read(), config_file)
    try:
        if os.path.basename(config_file) == HF_CONFIG_NAME:
            from albert_tf.checkpoints import config_from_hf  # the Hugging Face field names

            return config_from_hf(values)
        return AlbertConfig.from_dict(values)
    except ValueError as e:
        raise ValueError(f"{config_file}: {e}") from None


def model_config(path: str) -> AlbertConfig:
    """The config of a model path: `read_config` of `find_config`, refusing in one line when there is none.

    Args:
        path: a model folder or a checkpoint prefix.

    Raises:
        FileNotFoundError: neither ``albert_config.json`` nor ``config.json`` in its folder.
    """
    config_file = find_config(path)
    if config_file is None:
        raise FileNotFoundError(f"No {CONFIG_NAME} (or Hugging Face {HF_CONFIG_NAME}) in {folder_of(path)!r} "
                                f"for checkpoint {path!r}; pass config=AlbertConfig(...) or --albert_config_file.")
    return read_config(config_file)


def resolve_model_folder(path: str) -> ModelFolder:
    """Every part of a model folder or checkpoint prefix, by the module's rules.

    Args:
        path: a model folder (released, Hugging Face, this project's) or a TF checkpoint prefix.

    Returns:
        `ModelFolder`; its config_file and vocabulary are None when absent.

    Raises:
        FileNotFoundError, ValueError: from `find_weights` and `find_vocabulary` (one line each).
    """
    weights, weights_format = find_weights(path)
    config_file = os.path.join(folder_of(path), HF_CONFIG_NAME) if weights_format == HUGGING_FACE else find_config(path)
    return ModelFolder(folder=folder_of(path), weights=weights, weights_format=weights_format,
                       config_file=config_file, vocabulary=find_vocabulary(path))
