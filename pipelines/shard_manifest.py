"""The shards' part of PREFIX.manifest.json: size, record count and checksum per shard.

`albert-create-pretraining-data` (pipelines/create.py) and its Beam pipeline
(pipelines/beam_pipeline.py) both record each shard they complete with
`record_shards`, so the two write the same manifest.  An entry is

    "shards": {"pretrain-00003-of-00008.tfrecord":
                   {"bytes": 4096, "records": 57, "sha256": "9f2c..."}}

`bytes` and `sha256` are of the file as stored (compressed bytes for GZIP
shards); `records` counts the TFRecord records in it.  SHA-256, the hash the
manifest already uses for the input files, is the checksum: crc32c would be
faster but has no implementation in the standard library.

The rest of the manifest (settings, input fingerprints) decides the shards'
content and is what a rerun compares (`content_of`); the shards' entries are
facts about files already written and are left out of that comparison.

Concurrent workers of one run each merge their entries into the one
manifest.  On local paths the read-modify-write is serialised with an
`fcntl` lock on a temporary lock file beside the manifest (removed after
use).  Remote file systems (gs://) have no lock: two workers finishing at the
same moment may lose an entry, and a shard without an entry is read as
"unverified" by albert-pretrain, never as bad.

Example:

>>> import json, os, tempfile
>>> from pipelines.fileio import atomic_write
>>> folder = tempfile.mkdtemp()
>>> with atomic_write(os.path.join(folder, "pretrain.manifest.json")) as f:
...     _ = f.write(json.dumps({"format": "albert-tf pretraining data", "version": 1}))
>>> record_shards(folder, "pretrain", {"pretrain-00000-of-00001.tfrecord":
...     {"bytes": 10, "records": 1, "sha256": "ab"}})
>>> sorted(read_manifest(folder, "pretrain")["shards"])
['pretrain-00000-of-00001.tfrecord']
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from typing import Dict, Iterator, Optional

import tensorflow as tf

from pipelines import fileio
from pipelines import tfrecords

SHARDS_KEY = "shards"
CHECKSUM = "sha256"


def manifest_path(output_dir: str, file_prefix: str) -> str:
    """Where the manifest of the shards PREFIX-* in `output_dir` lives."""
    return os.path.join(output_dir, file_prefix + tfrecords.MANIFEST_SUFFIX)


def content_of(manifest: Optional[Dict[str, object]]) -> Optional[Dict[str, object]]:
    """The manifest without its shard entries: what decides the shards' bytes."""
    if manifest is None:
        return None
    return {k: v for k, v in manifest.items() if k != SHARDS_KEY}


def sha256_of(path: str, chunk_bytes: int = 4 << 20) -> str:
    """The hex SHA-256 of a file's bytes (any tf.io.gfile path)."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        while True:
            data = f.read(chunk_bytes)
            if not data:
                return digest.hexdigest()
            digest.update(data)


def shard_entry(path: str, records: int) -> Dict[str, object]:
    """{"bytes", "records", "sha256"} of a complete shard holding `records` records."""
    return {"bytes": int(tf.io.gfile.stat(path).length), "records": int(records),
            CHECKSUM: sha256_of(path)}


def count_records(path: str) -> int:
    """The records of a TFRecord file (`.gz`: GZIP), read once."""
    compression = "GZIP" if path.endswith(".gz") else ""
    dataset = tf.data.TFRecordDataset(path, compression_type=compression)
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())


def read_manifest(output_dir: str, file_prefix: str) -> Optional[Dict[str, object]]:
    """The parsed manifest, or None when there is none or it is not a JSON object."""
    path = manifest_path(output_dir, file_prefix)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            manifest = json.load(f)
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) else None


def write_manifest(path: str, manifest: Dict[str, object]) -> None:
    """Writes a manifest atomically, as deterministic text (workers agree byte for byte)."""
    with fileio.atomic_write(path) as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def _local_lock(path: str, timeout_s: float = 600.0) -> Iterator[None]:
    """An exclusive fcntl lock on `path` (local files only; elsewhere a no-op).

    The lock file is removed on release; a waiter that got the lock on a file
    already removed (another holder unlinked it meanwhile) tries again.
    """
    if "://" in path:
        yield
        return
    import fcntl

    deadline = time.time() + timeout_s
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.time() > deadline:
                        raise TimeoutError(f"Waited {timeout_s:.0f} s for the lock {path}.") from None
                    time.sleep(0.05)
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                try:
                    yield
                finally:
                    os.unlink(path)
                return
        finally:
            os.close(fd)


def record_shards(output_dir: str, file_prefix: str, entries: Dict[str, Dict[str, object]]) -> None:
    """Merges shard entries (name -> `shard_entry`) into the manifest.

    Args:
        output_dir: the shards' folder; its manifest must exist (the run's
            manifest check writes it before any shard).
        file_prefix: the shards' prefix.
        entries: the entries to add or replace.

    Raises:
        FileNotFoundError: no readable manifest (it was removed mid-run).
    """
    if not entries:
        return
    path = manifest_path(output_dir, file_prefix)
    head, tail = os.path.split(path)
    with _local_lock(os.path.join(head, f".{tail}.lock")):
        manifest = read_manifest(output_dir, file_prefix)
        if manifest is None:
            raise FileNotFoundError(f"No readable manifest {path} to record {len(entries)} shard(s) in.")
        shards = dict(manifest.get(SHARDS_KEY) or {})
        shards.update(entries)
        manifest[SHARDS_KEY] = {name: shards[name] for name in sorted(shards)}
        write_manifest(path, manifest)


def missing_entries(output_dir: str, file_prefix: str, paths) -> Dict[str, Dict[str, object]]:
    """Entries for complete shards the manifest does not list yet (e.g. written
    by a version without shard entries): each such shard is read once."""
    manifest = read_manifest(output_dir, file_prefix) or {}
    listed = manifest.get(SHARDS_KEY) or {}
    return {os.path.basename(p): shard_entry(p, count_records(p))
            for p in paths if os.path.basename(p) not in listed}
