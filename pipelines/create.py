"""The whole pretraining-data creation: text files -> TFRecord shards.

Sharding and workers.  Document d (corpus order) belongs to shard
d % num_shards; worker w of n writes the shards s with s % n == w.  Every
random choice is keyed by the document number (random_ops), so a shard's
content depends only on (inputs, seed, num_shards, options, s): n workers
together write exactly the files of one single-process run.

Streaming, bounded memory, shuffled shards.  One pass over the corpus per
worker: documents stream through tf.data (read, normalise, group, tokenize,
pair, mask, serialise; the parallel stages are deterministic), and each
instance is appended to one of K *spill* files of its shard, chosen by a keyed
hash of the instance (K = min(16, 256 // num_shards), at least 1).  Then each
spill file is shuffled with a seeded buffer of `shuffle_buffer_size` records
and appended to the shard.  This is the classic two-pass external shuffle: when
a spill file fits in the buffer (shards up to K * shuffle_buffer_size records)
the shard is a uniformly random permutation, like the original's global
shuffle; bigger spill files are shuffled within the buffer window.  Memory is
the tf.data buffers plus that shuffle buffer, whatever the corpus size (the
original holds every instance of every pass in RAM before writing).

Bounded open files.  At most `max_open_writers()` files (256, or fewer under a
low `ulimit -n`) are open for writing at a time.  A worker with more spill
files than that first writes its records to one staging file per group of spill
files and then splits each staging file into its group (repeatedly, if one
level is not enough): the spill files, hence the shards, are byte-identical to
a run that writes them directly.

Crash safety and reruns.  A shard is written under a temporary name and renamed
when complete; a run skips shards that already exist and redoes only the
missing ones (stale temporary and spill files of those shards are removed
first).  Beside the shards, PREFIX.manifest.json records the settings that
decide their content and a fingerprint of the inputs (name, size and SHA-256 of
every input file and of the SentencePiece model) and, per complete shard, its
size, record count and SHA-256 (pipelines/shard_manifest.py; albert-pretrain
checks the shards against them).  A rerun whose settings or
inputs differ stops with an error naming each difference, unless
`overwrite=True`, which removes the shards it replaces and writes new ones.
Workers of one run write the same manifest (it holds no worker-specific field).

Example:

>>> config = PretrainingDataConfig(max_seq_length=128, dupe_factor=10, num_shards=4)
>>> summary = create_pretraining_data(["corpus.txt"], "sp.model", "out",
...                                   config)                    # doctest: +SKIP
>>> summary.instances                                          # doctest: +SKIP
"""

import dataclasses
import hashlib
import json
import math
import os
import re
import struct
import time
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from pipelines import corpus
from pipelines import fileio
from pipelines import instances as instances_lib
from pipelines import masking as masking_lib
from pipelines import random_ops
from pipelines import shard_manifest
from pipelines import tfrecords
from pipelines import tokenizer as tokenizer_lib

MANIFEST_SUFFIX = tfrecords.MANIFEST_SUFFIX
MANIFEST_VERSION = 1
# The most files one worker keeps open for writing (lowered to fit `ulimit -n`).
MAX_OPEN_WRITERS = 256


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig:
    """The settings of a pretraining-data run (names and defaults as the
    original create_pretraining_data.py's flags where it has them).

    Instances: max_seq_length, dupe_factor, short_seq_prob,
    random_next_sentence, single_segment_random_negatives, random_seed.
    Masking: max_predictions_per_seq, masked_lm_prob, ngram,
    favor_shorter_ngram, do_whole_word_mask.
    Text: do_lower_case, max_line_bytes (longer lines are skipped and counted),
    max_document_lines (longer documents are cut; bounds memory).
    Output: num_shards, output_compression ("" or "GZIP"), shuffle_buffer_size
    (records in each spill file's shuffle buffer), file_prefix.
    Speed only (the shards do not depend on them): num_parallel_calls (None:
    AUTOTUNE), progress_interval_s, and docs_per_batch, except with random
    documents (NSP or single_segment_random_negatives), which are drawn from
    the same batch.

    Example:

    >>> config = PretrainingDataConfig(max_seq_length=128, num_shards=4)
    >>> config.instance_config(vocab_size=30000).masking.max_predictions_per_seq
    20
    >>> config.content_settings()["num_shards"]
    4
    """

    max_seq_length: int = 512
    dupe_factor: int = 40
    short_seq_prob: float = 0.1
    random_next_sentence: bool = False
    single_segment_random_negatives: bool = False
    random_seed: int = 12345
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    do_lower_case: bool = True
    max_line_bytes: int = 65536
    max_document_lines: int = 20000
    num_shards: int = 1
    output_compression: str = ""
    shuffle_buffer_size: int = 100_000
    file_prefix: str = "pretrain"
    docs_per_batch: int = 32
    num_parallel_calls: Optional[int] = None
    progress_interval_s: float = 30.0

    def __post_init__(self):
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards}.")
        if self.output_compression not in ("", "GZIP"):
            raise ValueError(
                f"output_compression must be '' or 'GZIP', got {self.output_compression!r}.")
        for name in ("docs_per_batch", "shuffle_buffer_size", "max_line_bytes",
                     "max_document_lines"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if not self.file_prefix or os.sep in self.file_prefix:
            raise ValueError(
                f"file_prefix must be a non-empty file name, got {self.file_prefix!r}.")
        # The instance and masking settings check themselves (any vocabulary size).
        self.instance_config(vocab_size=masking_lib.MASK_ID + 1)

    def masking_config(self, vocab_size: int) -> masking_lib.MaskingConfig:
        """The masking settings for a vocabulary of `vocab_size` pieces."""
        return masking_lib.MaskingConfig(
            vocab_size=vocab_size, max_predictions_per_seq=self.max_predictions_per_seq,
            masked_lm_prob=self.masked_lm_prob, ngram=self.ngram,
            favor_shorter_ngram=self.favor_shorter_ngram,
            do_whole_word_mask=self.do_whole_word_mask)

    def instance_config(self, vocab_size: int) -> instances_lib.InstanceConfig:
        """The instance settings (masking included) for a vocabulary size."""
        return instances_lib.InstanceConfig(
            masking=self.masking_config(vocab_size), max_seq_length=self.max_seq_length,
            dupe_factor=self.dupe_factor, short_seq_prob=self.short_seq_prob,
            random_next_sentence=self.random_next_sentence,
            single_segment_random_negatives=self.single_segment_random_negatives,
            random_seed=self.random_seed)

    @property
    def uses_random_documents(self) -> bool:
        return self.random_next_sentence or self.single_segment_random_negatives

    def content_settings(self) -> Dict[str, object]:
        """The settings the shards' names and bytes depend on (the manifest's)."""
        speed_only = {"num_parallel_calls", "progress_interval_s"}
        if not self.uses_random_documents:
            speed_only.add("docs_per_batch")
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in speed_only}


@dataclasses.dataclass
class PretrainingDataSummary:
    """What a creation run did (this worker, shards written in this run)."""

    documents: int = 0
    one_sentence_documents: int = 0
    empty_documents: int = 0
    instances: int = 0
    tokens: int = 0
    masked_tokens: int = 0
    label_one: int = 0
    skipped_lines_invalid_utf8: int = 0
    skipped_lines_too_long: int = 0
    dropped_chunks: int = 0
    seconds: float = 0.0
    shards_written: List[str] = dataclasses.field(default_factory=list)
    shards_already_complete: List[str] = dataclasses.field(default_factory=list)

    @property
    def masked_fraction(self) -> float:
        return self.masked_tokens / max(self.tokens, 1)

    @property
    def sop_label_one_fraction(self) -> float:
        return self.label_one / max(self.instances, 1)

    @property
    def instances_per_second(self) -> float:
        return self.instances / max(self.seconds, 1e-9)

    def to_text(self) -> str:
        return "\n".join([
            f"documents used: {self.documents}",
            f"documents skipped (one sentence): {self.one_sentence_documents}",
            f"documents skipped (no usable line): {self.empty_documents}",
            f"instances: {self.instances}",
            f"tokens: {self.tokens}",
            f"masked fraction: {self.masked_fraction:.4f}",
            f"label 1 (swapped/random) fraction: {self.sop_label_one_fraction:.4f}",
            f"skipped lines (invalid UTF-8): {self.skipped_lines_invalid_utf8}",
            f"skipped lines (too long): {self.skipped_lines_too_long}",
            f"chunks too short to pair: {self.dropped_chunks}",
            f"shards written: {len(self.shards_written)}, already complete: "
            f"{len(self.shards_already_complete)}",
            f"seconds: {self.seconds:.1f}, instances/s: {self.instances_per_second:.0f}",
        ])


def shard_path(output_dir: str, shard: int, num_shards: int, compression: str = "",
               prefix: str = "pretrain") -> str:
    """The final name of a shard."""
    suffix = ".tfrecord.gz" if compression == "GZIP" else ".tfrecord"
    return os.path.join(output_dir, f"{prefix}-{shard:05d}-of-{num_shards:05d}{suffix}")


def _temp_path(path: str, kind: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.{kind}")


def max_open_writers() -> int:
    """Files one worker may keep open for writing: MAX_OPEN_WRITERS, or fewer
    when the process's open-file limit (`ulimit -n`) would not leave room for
    the interpreter, TensorFlow and the input files."""
    try:
        import resource  # Unix only.

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return MAX_OPEN_WRITERS
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_WRITERS
    return max(2, min(MAX_OPEN_WRITERS, (soft - 32) // 2))


# --------------------------------------------------------------------------- manifest


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


def _read_manifest(path: str) -> Optional[Dict[str, object]]:
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


def _write_manifest(path: str, manifest: Dict[str, object]) -> None:
    # Deterministic text: every worker writes the same bytes.
    shard_manifest.write_manifest(path, manifest)


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


def _reconcile_manifest(output_dir: str, manifest: Dict[str, object],
                        config: PretrainingDataConfig, mine: Sequence[int],
                        overwrite: bool) -> None:
    """Checks the shards already in `output_dir` were made like this run's
    (or, with `overwrite`, removes those it replaces), then writes the manifest."""
    path = manifest_path(output_dir, config.file_prefix)
    old = _read_manifest(path)
    how_to = ("Rerun with --overwrite (overwrite=True) to replace them, or choose another "
              "output directory.")
    if not overwrite:
        if old is None:
            existing = _existing_shard_files(output_dir, config.file_prefix)
            # Read again: another worker of this run may have written it meanwhile.
            old = _read_manifest(path) if existing else None
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
        # New settings: the old shards' entries go with them.
        _write_manifest(path, manifest)


# --------------------------------------------------------------------------- spill files


_TAG = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")


class _FramedWriter:
    """Appends length-prefixed records to a temporary file of this run (spill
    and staging files are read back only by `_read_framed`, so they need no
    TFRecord framing, and plain reads avoid a tf.data iterator per file)."""

    def __init__(self, path: str):
        self._file = tf.io.gfile.GFile(path, "wb")
        self._file.write(b"")  # GFile opens lazily: create (and hold) the file now

    def write(self, record: bytes) -> None:
        self._file.write(_LENGTH.pack(len(record)) + record)

    def write_framed(self, framed: bytes) -> None:
        """Appends records already framed as `write` frames them."""
        self._file.write(framed)

    def close(self) -> None:
        self._file.close()


def _split_framed(framed: bytes) -> Iterator[bytes]:
    """The records of a string of framed records (`_FramedWriter` framing)."""
    offset = 0
    while offset < len(framed):
        (length,) = _LENGTH.unpack_from(framed, offset)
        offset += _LENGTH.size
        yield framed[offset:offset + length]
        offset += length


def _read_framed(path: str, block_bytes: int = 4 << 20) -> Iterator[bytes]:
    """The records `_FramedWriter` wrote to `path`, in order (read in blocks:
    two file reads per record would cost more than the records)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        pending = b""
        while True:
            data = f.read(block_bytes)
            if not data:
                if pending:
                    raise ValueError(f"Truncated spill file {path!r}: {len(pending)} "
                                     "trailing bytes are not a whole record.")
                return
            pending += data
            offset = 0
            while offset + _LENGTH.size <= len(pending):
                (length,) = _LENGTH.unpack_from(pending, offset)
                end = offset + _LENGTH.size + length
                if end > len(pending):
                    break
                yield pending[offset + _LENGTH.size:end]
                offset = end
            pending = pending[offset:]


class _SpillRouter:
    """Appends records to numbered spill files with at most `max_open` files
    open.

    With more files than that, records (tagged with their file number) go to
    one staging file per contiguous range of file numbers, and `finish` splits
    every staging file the same way until the ranges are small enough: each
    spill file receives its records in the order they were written.

    Args:
        paths: the spill files; record i of `write(i, ...)` goes to paths[i].
        staging_prefix: path prefix of the staging files.
        max_open: the most files open for writing at a time (>= 2).
        low, high: the range of file numbers this router handles.
    """

    def __init__(self, paths: Sequence[str], staging_prefix: str, max_open: int,
                 low: int = 0, high: Optional[int] = None):
        self._paths = paths
        self._prefix = staging_prefix
        self._max_open = max_open
        self._low = low
        high = len(paths) if high is None else high
        self._direct = high - low <= max_open
        if self._direct:
            self._ranges = [(i, i + 1) for i in range(low, high)]
            targets = paths[low:high]
        else:
            self._width = math.ceil((high - low) / max_open)
            self._ranges = [(a, min(a + self._width, high))
                            for a in range(low, high, self._width)]
            targets = [f"{staging_prefix}-{a:06d}-{b:06d}" for a, b in self._ranges]
        self._targets = targets
        self._writers: List[_FramedWriter] = []
        try:
            for path in targets:
                self._writers.append(_FramedWriter(path))
        except BaseException:
            self.close()
            raise

    def write(self, index: int, record: bytes) -> None:
        if self._direct:
            self._writers[index - self._low].write(record)
        else:
            self._writers[(index - self._low) // self._width].write(_TAG.pack(index) + record)

    def write_framed(self, index: int, framed: bytes) -> None:
        """Appends records already framed (`_FramedWriter` framing) to file `index`."""
        if self._direct:
            self._writers[index - self._low].write_framed(framed)
        else:
            for record in _split_framed(framed):
                self.write(index, record)

    def close(self, quiet: bool = False) -> None:
        """Closes every file; `quiet`: ignore errors (another one is on its way up)."""
        writers, self._writers = self._writers, []
        for writer in writers:
            try:
                writer.close()
            except (OSError, tf.errors.OpError):
                if not quiet:
                    raise

    def finish(self) -> None:
        """Closes the files and splits the staging files into the spill files."""
        self.close()
        if self._direct:
            return
        for (low, high), staging in zip(self._ranges, self._targets):
            child = _SpillRouter(self._paths, staging, self._max_open, low, high)
            try:
                for tagged in _read_framed(staging):
                    child.write(_TAG.unpack_from(tagged)[0], tagged[_TAG.size:])
                child.finish()
            finally:
                child.close()
            tf.io.gfile.remove(staging)


# --------------------------------------------------------------------------- the run


def create_pretraining_data(
        input_files: Sequence[str], spm_model_file: str, output_dir: str,
        config: Optional[PretrainingDataConfig] = None, *, shard_index: int = 0,
        num_workers: int = 1, overwrite: bool = False,
        **settings) -> PretrainingDataSummary:
    """Creates ALBERT pretraining TFRecord shards from text.

    Args:
        input_files: files or globs (comma-separated allowed), one sentence
            per line, blank line between documents; `.gz` accepted.
        spm_model_file: SentencePiece model with <pad>, <unk>, [CLS], [SEP],
            [MASK] at ids 0-4 (albert-create-vocab writes one).
        output_dir: where the shards go (created).
        config: the settings (default: PretrainingDataConfig()).
        shard_index: this worker's index in [0, num_workers): it writes the
            shards s with s % num_workers == shard_index.
        num_workers: number of independent worker processes.
        overwrite: replace shards made with other settings or inputs (and this
            worker's shards in any case) instead of stopping with an error.
            Give it to every worker of the run.
        **settings: PretrainingDataConfig fields that replace those of
            `config` (a shorthand, e.g. `num_shards=4`).

    Returns:
        A PretrainingDataSummary.

    Raises:
        FileNotFoundError: missing inputs or model.
        ValueError: bad settings, a vocabulary without the special pieces, an
            empty corpus, a corpus that yields no instance at all, or an
            output directory holding shards made with other settings or inputs
            (without `overwrite`).
    """
    start_time = time.time()
    config = _with_settings(config or PretrainingDataConfig(), settings)
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}.")
    if not 0 <= shard_index < num_workers:
        raise ValueError(
            f"shard_index must be in [0, num_workers={num_workers}), got {shard_index}.")
    vocab = tokenizer_lib.SentencePieceVocab.from_file(spm_model_file)
    inst_cfg = config.instance_config(vocab.vocab_size)
    files = corpus.resolve_input_files(input_files)
    tf.io.gfile.makedirs(output_dir)
    mine = [s for s in range(config.num_shards) if s % num_workers == shard_index]
    manifest = build_manifest(config, files, spm_model_file)
    _reconcile_manifest(output_dir, manifest, config, mine, overwrite)

    summary = PretrainingDataSummary()
    finals = {s: shard_path(output_dir, s, config.num_shards, config.output_compression,
                            config.file_prefix) for s in mine}
    pending = [s for s in mine if not tf.io.gfile.exists(finals[s])]
    summary.shards_already_complete = [finals[s] for s in mine if s not in pending]
    if summary.shards_already_complete:
        logging.info("%d of this worker's %d shards already complete; skipping them.",
                     len(summary.shards_already_complete), len(mine))
    if not pending:
        _record_shards(output_dir, config, {}, summary.shards_already_complete)
        summary.seconds = time.time() - start_time
        return summary
    logging.info("Worker %d/%d: %d shard(s) to write from %d input file(s).",
                 shard_index, num_workers, len(pending), len(files))

    builder = instances_lib.InstanceBuilder(vocab, inst_cfg)
    dataset = _instance_dataset(files, builder, config, pending)
    buckets = spill_buckets(config.num_shards)
    spills = {(s, b): _temp_path(finals[s], f"spill-{b:02d}")
              for s in pending for b in range(buckets)}
    staging = os.path.join(output_dir, f".{config.file_prefix}-w{shard_index:05d}-staging")
    _remove_stale_temporaries(output_dir, [finals[s] for s in pending], staging)
    counts = _write_spill_files(dataset, config, spills, staging, summary, start_time)

    if summary.instances == 0 and num_workers == 1:
        for path in spills.values():
            tf.io.gfile.remove(path)
        if not summary.shards_already_complete:
            # Nothing was made: the next run may use other inputs without --overwrite.
            tf.io.gfile.remove(manifest_path(output_dir, config.file_prefix))
        raise ValueError(
            f"No instance could be made from {files[:5]!r}: {summary.documents} usable "
            f"documents, {summary.one_sentence_documents} one-sentence documents skipped, "
            f"{summary.skipped_lines_invalid_utf8 + summary.skipped_lines_too_long} lines "
            "skipped. Documents need at least two sentences (one per line, blank lines "
            "between documents).")
    if summary.one_sentence_documents > summary.documents:
        logging.warning(
            "Most documents (%d of %d) have a single sentence and were skipped: is the input "
            "one sentence per line with blank lines only between documents?",
            summary.one_sentence_documents,
            summary.one_sentence_documents + summary.documents)

    written = {}
    for s in pending:
        written[finals[s]] = _write_shard(
            finals[s], [spills[(s, b)] for b in range(buckets)],
            [_shard_seed(config.random_seed, s * buckets + b) for b in range(buckets)], config)
        summary.shards_written.append(finals[s])
        logging.info("Wrote %s (%d instances).", finals[s], counts[s])
    _record_shards(output_dir, config, written, summary.shards_already_complete)
    summary.seconds = time.time() - start_time
    return summary


def _record_shards(output_dir: str, config: PretrainingDataConfig, written: Dict[str, int],
                   complete: Sequence[str]) -> None:
    """Records size, record count and SHA-256 of the shards written now
    (path -> records) and of complete ones the manifest does not list yet."""
    entries = shard_manifest.missing_entries(output_dir, config.file_prefix, complete)
    entries.update({os.path.basename(path): shard_manifest.shard_entry(path, records)
                    for path, records in written.items()})
    shard_manifest.record_shards(output_dir, config.file_prefix, entries)


def _remove_stale_temporaries(output_dir: str, pending_finals: List[str],
                              staging_prefix: str) -> None:
    """Removes spill, staging and incomplete files an interrupted run of this
    worker left (one directory listing, not one glob per shard)."""
    pending_names = {os.path.basename(path) for path in pending_finals}
    staging_name = os.path.basename(staging_prefix) + "-"
    temporary = re.compile(r"^\.(.+)\.(spill.*|incomplete)$")
    for name in tf.io.gfile.listdir(output_dir):
        match = temporary.match(name)
        if name.startswith(staging_name) or (match and match.group(1) in pending_names):
            tf.io.gfile.remove(os.path.join(output_dir, name))


def _with_settings(config: PretrainingDataConfig,
                   settings: Dict[str, object]) -> PretrainingDataConfig:
    known = {f.name for f in dataclasses.fields(PretrainingDataConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise TypeError(f"create_pretraining_data got unknown setting(s) {unknown}; "
                        f"PretrainingDataConfig fields are {sorted(known)}.")
    return dataclasses.replace(config, **settings) if settings else config


def _write_spill_files(dataset: tf.data.Dataset, config: PretrainingDataConfig,
                       spills: Dict[tuple, str], staging_prefix: str,
                       summary: PretrainingDataSummary, start_time: float) -> Dict[int, int]:
    """Pass 1: every instance, in document order, to a spill file of its
    shard; fills the summary's counts.  Returns instances per shard.

    The dataset hands over, per batch, the framed records of each spill file
    already joined (`_spill_chunks`): one write per file and batch, not one
    Python call per record."""
    keys = list(spills)
    counts = {s: 0 for s, _ in keys}
    router = _SpillRouter([spills[k] for k in keys], staging_prefix, max_open_writers())
    last_log = time.time()
    try:
        for out in dataset.as_numpy_iterator():
            for index in np.flatnonzero(out["spill_sizes"]).tolist():
                router.write_framed(index, out["spill_chunks"][index])
            per_shard = np.bincount(out["doc_id"] % config.num_shards,
                                    minlength=config.num_shards)
            for shard in counts:
                counts[shard] += int(per_shard[shard])
            _add_batch_counts(summary, out)
            now = time.time()
            if now - last_log >= config.progress_interval_s:
                last_log = now
                logging.info("%d instances from %d documents, %.0f instances/s",
                             summary.instances, summary.documents,
                             summary.instances / (now - start_time))
        router.finish()
    except BaseException:
        # The write's error (e.g. a full disk), not a close's "Bad file descriptor".
        router.close(quiet=True)
        raise
    return counts


def _add_batch_counts(summary: PretrainingDataSummary, out: Dict[str, np.ndarray]) -> None:
    sentences = out["doc_sentences"]
    summary.documents += int(np.sum(sentences >= 2))
    summary.one_sentence_documents += int(np.sum(sentences == 1))
    summary.empty_documents += int(np.sum(sentences == 0))
    summary.skipped_lines_invalid_utf8 += int(np.sum(out["doc_bad_utf8"]))
    summary.skipped_lines_too_long += int(np.sum(out["doc_too_long"]))
    summary.dropped_chunks += int(out["dropped_chunks"])
    summary.instances += len(out["doc_id"])
    summary.tokens += int(np.sum(out["length"]))
    summary.masked_tokens += int(np.sum(out["num_masked"]))
    summary.label_one += int(np.sum(out["next_sentence_labels"]))


def _write_shard(final: str, spill_paths: List[str], seeds: List[int],
                 config: PretrainingDataConfig) -> int:
    """Pass 2 for one shard: shuffle every spill file (bounded buffer, seeded
    per shard and file), append to a temporary file, rename when complete.
    Returns the number of records written."""
    temp = _temp_path(final, "incomplete")
    options = tf.io.TFRecordOptions(compression_type=config.output_compression or None)
    records = 0
    with tf.io.TFRecordWriter(temp, options) as writer:
        for path, seed in zip(spill_paths, seeds):
            for record in shuffled_spill(_read_framed(path), seed, config.shuffle_buffer_size):
                writer.write(record)
                records += 1
    tf.io.gfile.rename(temp, final, overwrite=True)
    for path in spill_paths:
        tf.io.gfile.remove(path)
    return records


def shuffled_spill(records: Iterator[bytes], seed: int, shuffle_buffer_size: int) -> Iterator[bytes]:
    """The records of one spill file (in spill order) as its shard holds them:
    each buffer-sized chunk permuted with the stateless key (seed, chunk).

    Eager, not a tf.data pipeline per shard: with thousands of small shards
    its set-up would dominate.  Unlike Dataset.shuffle(seed=...), a stateless
    permutation does not depend on the global TF seed (tf.random.set_seed).
    Also used by the Beam pipeline (pipelines/beam_pipeline.py).
    """
    for index, chunk in enumerate(_chunks(records, shuffle_buffer_size)):
        key = tf.constant([seed, index], tf.int64)
        shuffled = tf.random.experimental.stateless_shuffle(tf.constant(chunk, tf.string), seed=key)
        for start in range(0, int(shuffled.shape[0]), 1024):
            yield from shuffled[start:start + 1024].numpy()


def _chunks(records: Iterator[bytes], size: int) -> Iterator[List[bytes]]:
    chunk: List[bytes] = []
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def spill_buckets(num_shards: int) -> int:
    """Spill files per shard: a function of num_shards only (determinism);
    about 256 spill files in all when there are fewer than 256 shards."""
    return max(1, min(16, 256 // num_shards))


def spill_bucket(shuffle_key: tf.Tensor, buckets: int) -> tf.Tensor:
    """Which spill file of its shard an instance goes to: a keyed hash of the
    instance (its `shuffle_key`), not of its position."""
    return tf.cast(tf.bitwise.right_shift(
        random_ops.fold_in(shuffle_key, random_ops.SHUFFLE),
        tf.constant(33, tf.uint64)), tf.int64) % buckets


def _shard_seed(seed: int, shard: int) -> int:
    key = random_ops.fold_in(random_ops.fold_in(random_ops.seed_key(seed),
                                                random_ops.SHUFFLE), shard)
    return int(tf.bitwise.right_shift(key, tf.constant(2, tf.uint64)).numpy())


def _instance_dataset(files: List[str], builder: instances_lib.InstanceBuilder,
                      config: PretrainingDataConfig, pending: List[int]) -> tf.data.Dataset:
    """Documents of the pending shards -> per batch, the framed records of
    every spill file (`_write_spill_files`) and the batch's counts."""
    num_shards = config.num_shards
    buckets = spill_buckets(num_shards)
    wanted = tf.constant([s in set(pending) for s in range(num_shards)])
    # Spill file number of (shard, bucket): the order of `spills` in create_pretraining_data.
    first_spill = tf.constant([pending.index(s) * buckets if s in pending else 0
                               for s in range(num_shards)], tf.int64)
    docs = corpus.documents_dataset(files, do_lower_case=config.do_lower_case,
                                    max_line_bytes=config.max_line_bytes,
                                    max_document_lines=config.max_document_lines)
    docs = docs.filter(tf.autograph.experimental.do_not_convert(
        lambda e: tf.gather(wanted, e["doc_id"] % num_shards)))
    docs = _document_batches(docs, builder.config.uses_random_documents, num_shards,
                             config.docs_per_batch)

    # No autograph: the code has no tensor-dependent Python control flow, and
    # converting it would triple the start-up (tracing) time.
    @tf.autograph.experimental.do_not_convert
    def process(batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        lines = batch["lines"]
        if not isinstance(lines, tf.RaggedTensor):
            lines = tf.RaggedTensor.from_tensor(lines)
        feats, stats = builder.build(lines, batch["doc_id"])
        bucket = spill_bucket(feats["shuffle_key"], buckets)
        spill = tf.gather(first_spill, feats["doc_id"] % num_shards) + bucket
        chunks, sizes = _spill_chunks(tfrecords.serialize_examples(feats), spill,
                                      len(pending) * buckets)
        return {
            "spill_chunks": chunks,
            "spill_sizes": sizes,
            "doc_id": feats["doc_id"],
            "length": feats["length"],
            "num_masked": feats["num_masked"],
            "next_sentence_labels": feats["next_sentence_labels"],
            "doc_sentences": stats["sentences"],
            "doc_bad_utf8": batch["bad_utf8"],
            "doc_too_long": batch["too_long"],
            "dropped_chunks": stats["dropped_chunks"],
        }

    calls = tf.data.AUTOTUNE if config.num_parallel_calls is None else config.num_parallel_calls
    return docs.map(process, num_parallel_calls=calls, deterministic=True).prefetch(2)


def _document_batches(docs: tf.data.Dataset, uses_random_documents: bool, num_shards: int,
                      docs_per_batch: int) -> tf.data.Dataset:
    """Ragged batches of `docs_per_batch` documents, in corpus order."""
    if uses_random_documents:
        # Random other documents come from the same batch: batch per shard, so that
        # a shard's batches do not depend on which other shards this worker has.
        return docs.group_by_window(
            key_func=lambda e: e["doc_id"] % num_shards,
            reduce_func=lambda _, window: window.ragged_batch(docs_per_batch),
            window_size=docs_per_batch)
    return docs.ragged_batch(docs_per_batch)


# One single-byte string per byte value: the little-endian frame headers in the graph.
_BYTE_STRINGS = [bytes([value]) for value in range(256)]


def _spill_chunks(serialized: tf.Tensor, spill: tf.Tensor, num_spills: int):
    """Frames records as `_FramedWriter.write` does (8-byte little-endian
    length, then the bytes) and joins them per spill file, in batch order.

    Args:
        serialized: string [C] records.
        spill: int64 [C] spill file number of each record.
        num_spills: number of spill files.

    Returns:
        (chunks, sizes): string [num_spills] the framed records of each file,
        int32 [num_spills] how many records each holds.
    """
    length = tf.cast(tf.strings.length(serialized), tf.int64)
    shifts = tf.range(0, 64, 8, dtype=tf.int64)
    byte_values = tf.bitwise.bitwise_and(tf.bitwise.right_shift(length[:, None], shifts[None, :]),
                                         tf.constant(255, tf.int64))
    header = tf.strings.reduce_join(tf.gather(tf.constant(_BYTE_STRINGS), byte_values), axis=1)
    framed = tf.strings.join([header, serialized])
    chunks = tf.strings.unsorted_segment_join(framed, spill, num_spills)
    sizes = tf.math.unsorted_segment_sum(tf.ones_like(spill, tf.int32), spill, num_spills)
    return chunks, sizes
