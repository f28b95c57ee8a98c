"""The run: `create_pretraining_data`, text files -> TFRecord shards (the design
is in pipelines/create/__init__.py).

Pass 1 streams the documents of this worker's pending shards through tf.data
(read, normalise, group, tokenize, pair, mask, serialise, frame) into the spill
files; pass 2 shuffles each spill file into its shard, written under a
temporary name and renamed when complete; the manifest records each shard.
"""

import dataclasses
import os
import re
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from pipelines import corpus
from pipelines import instances as instances_lib
from pipelines import shard_manifest
from pipelines import tfrecords
from pipelines import tokenizer as tokenizer_lib
from pipelines.create import spill
from pipelines.create.config import PretrainingDataConfig, PretrainingDataSummary, shard_path, temp_path
from pipelines.create.manifest import build_manifest, manifest_path, reconcile_manifest


def create_pretraining_data(
        input_files: Sequence[str], spm_model_file: str, output_dir: str,
        config: Optional[PretrainingDataConfig] = None, *, shard_index: int = 0,
        num_workers: int = 1, overwrite: bool = False,
        progress: Optional[Callable[[PretrainingDataSummary], None]] = None,
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
        progress: called with the running summary every
            `config.progress_interval_s` seconds of pass 1 (beside the log line).
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
    reconcile_manifest(output_dir, manifest, config, mine, overwrite)

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
    buckets = spill.spill_buckets(config.num_shards)
    spills = {(s, b): temp_path(finals[s], f"spill-{b:02d}")
              for s in pending for b in range(buckets)}
    staging = os.path.join(output_dir, f".{config.file_prefix}-w{shard_index:05d}-staging")
    remove_stale_temporaries(output_dir, [finals[s] for s in pending], staging)
    counts = _write_spill_files(dataset, config, spills, staging, summary, start_time, progress)

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
            [spill.shard_seed(config.random_seed, s * buckets + b) for b in range(buckets)], config)
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


def remove_stale_temporaries(output_dir: str, pending_finals: List[str],
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
                       summary: PretrainingDataSummary, start_time: float,
                       progress: Optional[Callable[[PretrainingDataSummary], None]]) -> Dict[int, int]:
    """Pass 1: every instance, in document order, to a spill file of its
    shard; fills the summary's counts.  Returns instances per shard.

    The dataset hands over, per batch, the framed records of each spill file
    already joined (`spill.spill_chunks`): one write per file and batch, not one
    Python call per record.  Every `config.progress_interval_s` seconds it
    logs the counts so far and calls `progress` with the summary (its seconds
    set to the time since the run started)."""
    keys = list(spills)
    counts = {s: 0 for s, _ in keys}
    router = spill.SpillRouter([spills[k] for k in keys], staging_prefix, spill.max_open_writers())
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
                summary.seconds = now - start_time
                logging.info("%d instances from %d documents, %.0f instances/s",
                             summary.instances, summary.documents, summary.instances_per_second)
                if progress is not None:
                    progress(summary)
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
    temp = temp_path(final, "incomplete")
    options = tf.io.TFRecordOptions(compression_type=config.output_compression or None)
    records = 0
    with tf.io.TFRecordWriter(temp, options) as writer:
        for path, seed in zip(spill_paths, seeds):
            for record in spill.shuffled_spill(spill.read_framed(path), seed, config.shuffle_buffer_size):
                writer.write(record)
                records += 1
    tf.io.gfile.rename(temp, final, overwrite=True)
    for path in spill_paths:
        tf.io.gfile.remove(path)
    return records


def _instance_dataset(files: List[str], builder: instances_lib.InstanceBuilder,
                      config: PretrainingDataConfig, pending: List[int]) -> tf.data.Dataset:
    """Documents of the pending shards -> per batch, the framed records of
    every spill file (`_write_spill_files`) and the batch's counts."""
    num_shards = config.num_shards
    buckets = spill.spill_buckets(num_shards)
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
        bucket = spill.spill_bucket(feats["shuffle_key"], buckets)
        spill_index = tf.gather(first_spill, feats["doc_id"] % num_shards) + bucket
        chunks, sizes = spill.spill_chunks(tfrecords.serialize_examples(feats), spill_index,
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
