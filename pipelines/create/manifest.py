"""The content part of PREFIX.manifest.json: the settings that decide the shards'
bytes and a fingerprint of every input (name, size, SHA-256 of each input file
and of the SentencePiece model). A rerun whose manifest differs stops with an
error naming each difference (`reconcile_manifest`), unless it overwrites, which
removes the shards it replaces. The shards' own entries (size, records,
checksum) are pipelines/shard_manifest.py's.

Example:

>>> old = {"format": "albert-tf pretraining data", "version": 1, "settings": {"dupe_factor": 10}}
>>> manifest_differences(old, dict(old, settings={"dupe_factor": 40}))
['setting dupe_factor: old 10, new 40']
"""

import hashlib
import json
import os
import re
from typing import Dict, List, Optional, Sequence

import tensorflow as tf
from absl import logging

from pipelines import shard_manifest
from pipelines import tfrecords
from pipelines.create.config import PretrainingDataConfig

MANIFEST_SUFFIX = tfrecords.MANIFEST_SUFFIX
MANIFEST_VERSION = 1


def manifest_path(output_dir: str, file_prefix: str = "pretrain") -> str:
    """Where the manifest of the shards PREFIX-* in `output_dir` lives."""
    return os.path.join(output_dir, file_prefix + MANIFEST_SUFFIX)


def file_fingerprint(path: str, chunk_bytes: int = 4 << 20) -> Dict[str, object]:
    """{"name": base name, "bytes": size, "sha256": hex digest} of a file."""
    digest = hashlib.sha256()
    size = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while True:
            data = f.read(chunk_bytes)
            if not data:
                break
            digest.update(data)
            size += len(data)
    return {"name": os.path.basename(path), "bytes": size, "sha256": digest.hexdigest()}


def build_manifest(config: PretrainingDataConfig, input_files: Sequence[str],
                   spm_model_file: str) -> Dict[str, object]:
    """The manifest of a run: content settings and input fingerprints.

    Names, not folders, identify the files, so a corpus moved elsewhere (or
    mounted at another path on another worker's machine) still matches.
    """
    return {
        "format": "albert-tf pretraining data",
        "version": MANIFEST_VERSION,
        "settings": config.content_settings(),
        "input_files": [file_fingerprint(path) for path in input_files],
        "spm_model": file_fingerprint(spm_model_file),
    }


def _describe_file(entry: Dict[str, object]) -> str:
    digest = str(entry.get("sha256"))[:12]
    return f"{entry.get('name')} ({entry.get('bytes')} bytes, sha256 {digest})"


def manifest_differences(old: Dict[str, object], new: Dict[str, object]) -> List[str]:
    """What differs between two manifests, one readable line per difference."""
    for key in ("format", "version"):
        if old.get(key) != new.get(key):
            # Another layout: field-by-field differences would mean nothing.
            return [f"manifest {key}: old {old.get(key)!r}, new {new.get(key)!r}"]
    diffs = []
    old_settings, new_settings = old.get("settings", {}), new.get("settings", {})
    names = list(new_settings) + [k for k in old_settings if k not in new_settings]
    for name in names:
        missing = "(not set)"
        before, after = old_settings.get(name, missing), new_settings.get(name, missing)
        if before != after:
            diffs.append(f"setting {name}: old {before!r}, new {after!r}")
    old_inputs, new_inputs = old.get("input_files", []), new.get("input_files", [])
    if len(old_inputs) != len(new_inputs):
        diffs.append(f"input files: old {len(old_inputs)} file(s), new {len(new_inputs)}")
    changed = [i for i, (a, b) in enumerate(zip(old_inputs, new_inputs)) if a != b]
    for i in changed[:3]:
        diffs.append(f"input file {i + 1}: old {_describe_file(old_inputs[i])}, "
                     f"new {_describe_file(new_inputs[i])}")
    if len(changed) > 3:
        diffs.append(f"... and {len(changed) - 3} more changed input file(s)")
    if old.get("spm_model") != new.get("spm_model"):
        diffs.append(f"SentencePiece model: old {_describe_file(old.get('spm_model') or {})}, "
                     f"new {_describe_file(new['spm_model'])}")
    return diffs


def read_manifest(path: str) -> Optional[Dict[str, object]]:
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            manifest = json.load(f)
        if not isinstance(manifest, dict):
            raise ValueError(f"expected a JSON object, got {type(manifest).__name__}")
        return manifest
    except ValueError as e:
        # Unreadable: treated as "made with unknown settings".
        return {"format": f"unreadable ({e})"}


def _shard_file_pattern(file_prefix: str) -> "re.Pattern":
    # Final shards and their temporary/spill files (a leading dot, a suffix).
    return re.compile(r"^(\.?)" + re.escape(file_prefix)
                      + r"-(\d{5,})-of-(\d{5,})\.tfrecord(\.gz)?(\..+)?$")


def _existing_shard_files(output_dir: str, file_prefix: str) -> List[str]:
    pattern = _shard_file_pattern(file_prefix)
    return sorted(name for name in tf.io.gfile.listdir(output_dir)
                  if pattern.match(name) and not name.startswith("."))


def _remove_replaced_files(output_dir: str, config: PretrainingDataConfig,
                           mine: Sequence[int]) -> int:
    """Removes this worker's shards and every shard (or temporary file) of
    another shard count or compression: what `overwrite` replaces.

    Shards of the new set that belong to other workers are theirs to replace
    (every worker gets the same `overwrite`), so concurrent workers never
    remove each other's new output.
    """
    pattern = _shard_file_pattern(config.file_prefix)
    mine = set(mine)
    removed = 0
    for name in tf.io.gfile.listdir(output_dir):
        match = pattern.match(name)
        if not match:
            continue
        shard, count = int(match.group(2)), int(match.group(3))
        same_set = (count == config.num_shards
                    and bool(match.group(4)) == (config.output_compression == "GZIP"))
        if same_set and shard not in mine:
            continue
        try:
            tf.io.gfile.remove(os.path.join(output_dir, name))
            removed += not match.group(1)
        except tf.errors.NotFoundError:  # another worker removed it first
            pass
    return removed


def reconcile_manifest(output_dir: str, manifest: Dict[str, object],
                        config: PretrainingDataConfig, mine: Sequence[int],
                        overwrite: bool) -> None:
    """Checks the shards already in `output_dir` were made like this run's
    (or, with `overwrite`, removes those it replaces), then writes the manifest."""
    path = manifest_path(output_dir, config.file_prefix)
    old = read_manifest(path)
    how_to = ("Rerun with --overwrite (overwrite=True) to replace them, or choose another "
              "output directory.")
    if not overwrite:
        if old is None:
            existing = _existing_shard_files(output_dir, config.file_prefix)
            # Read again: another worker of this run may have written it meanwhile.
            old = read_manifest(path) if existing else None
            if old is None and existing:
                raise ValueError(
                    f"{output_dir} holds {len(existing)} shard(s) ({existing[0]}, ...) but no "
                    f"manifest {os.path.basename(path)}: the settings and inputs that made them "
                    f"are unknown. {how_to}")
        if old is not None and shard_manifest.content_of(old) != manifest:
            raise ValueError(
                f"{output_dir} holds shards made with other settings or inputs (from {path}): "
                + "; ".join(manifest_differences(old, manifest)) + f". {how_to}")
    else:
        removed = _remove_replaced_files(output_dir, config, mine)
        if removed:
            logging.info("--overwrite: removed %d old shard(s) in %s.", removed, output_dir)
    if shard_manifest.content_of(old) != manifest:
        # New settings: the old shards' entries go with them. Deterministic text: every worker writes the
        # same bytes.
        shard_manifest.write_manifest(path, manifest)
