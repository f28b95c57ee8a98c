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
hash of the instance (K = min(16, 256 // num_shards), at least 1, so at most
about 256 files are open).  Then each spill file is shuffled with a seeded
buffer of `shuffle_buffer_size` records and appended to the shard.  This is the
classic two-pass external shuffle: when a spill file fits in the buffer (shards
up to K * shuffle_buffer_size records) the shard is a uniformly random
permutation, like the original's global shuffle; bigger spill files are
shuffled within the buffer window.  Memory is the tf.data buffers plus that
shuffle buffer, whatever the corpus size (the original holds every instance of
every pass in RAM before writing).

Crash safety.  A shard is written under a temporary name and renamed when
complete; a run skips shards that already exist and redoes only the missing
ones (stale temporary and spill files of those shards are removed first).

Example:

>>> summary = create_pretraining_data(["corpus.txt"], "sp.model", "out",
...                                   max_seq_length=128, dupe_factor=10,
...                                   num_shards=4)              # doctest: +SKIP
>>> summary.instances                                          # doctest: +SKIP
"""

import dataclasses
import os
import time
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from pipelines import corpus
from pipelines import instances as instances_lib
from pipelines import masking as masking_lib
from pipelines import random_ops
from pipelines import tfrecords
from pipelines import tokenizer as tokenizer_lib


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


def create_pretraining_data(
        input_files: Sequence[str], spm_model_file: str, output_dir: str, *,
        max_seq_length: int = 512, max_predictions_per_seq: int = 20,
        masked_lm_prob: float = 0.15, ngram: int = 3, dupe_factor: int = 40,
        short_seq_prob: float = 0.1, random_seed: int = 12345, num_shards: int = 1,
        shard_index: int = 0, num_workers: int = 1, do_lower_case: bool = True,
        do_whole_word_mask: bool = True, favor_shorter_ngram: bool = True,
        random_next_sentence: bool = False, single_segment_random_negatives: bool = False,
        output_compression: str = "", shuffle_buffer_size: int = 100_000,
        max_line_bytes: int = 65536, max_document_lines: int = 20000,
        docs_per_batch: int = 32, num_parallel_calls: Optional[int] = None,
        progress_interval_s: float = 30.0, file_prefix: str = "pretrain") -> PretrainingDataSummary:
    """Creates ALBERT pretraining TFRecord shards from text.

    Args:
        input_files: files or globs (comma-separated allowed), one sentence
            per line, blank line between documents; `.gz` accepted.
        spm_model_file: SentencePiece model with <pad>, <unk>, [CLS], [SEP],
            [MASK] at ids 0-4 (albert-create-vocab writes one).
        output_dir: where the shards go (created).
        max_seq_length, max_predictions_per_seq, masked_lm_prob, ngram,
        dupe_factor, short_seq_prob, random_seed, do_lower_case,
        do_whole_word_mask, favor_shorter_ngram, random_next_sentence: as the
            original's flags.
        num_shards: total number of output shards.
        shard_index: this worker's index in [0, num_workers): it writes the
            shards s with s % num_workers == shard_index.
        num_workers: number of independent worker processes.
        single_segment_random_negatives: the original's random-document B for
            one-segment chunks (default: pure SOP, the segment is split).
        output_compression: "" or "GZIP".
        shuffle_buffer_size: records in the per-shard shuffle buffer.
        max_line_bytes: longer lines are skipped (counted).
        max_document_lines: longer documents are cut (bounds memory).
        docs_per_batch: documents processed per vectorised call.
        num_parallel_calls: parallel calls of the processing stage (default
            AUTOTUNE; the output does not depend on it).
        progress_interval_s: seconds between progress log lines.
        file_prefix: shard file name prefix.

    Returns:
        A PretrainingDataSummary.

    Raises:
        FileNotFoundError: missing inputs or model.
        ValueError: bad settings, a vocabulary without the special pieces, an
            empty corpus, or a corpus that yields no instance at all.
    """
    start_time = time.time()
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}.")
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}.")
    if not 0 <= shard_index < num_workers:
        raise ValueError(
            f"shard_index must be in [0, num_workers={num_workers}), got {shard_index}.")
    if output_compression not in ("", "GZIP"):
        raise ValueError(f"output_compression must be '' or 'GZIP', got {output_compression!r}.")
    if docs_per_batch < 1 or shuffle_buffer_size < 1:
        raise ValueError(
            f"docs_per_batch and shuffle_buffer_size must be >= 1, got {docs_per_batch}, "
            f"{shuffle_buffer_size}.")
    vocab = tokenizer_lib.SentencePieceVocab.from_file(spm_model_file)
    mask_cfg = masking_lib.MaskingConfig(
        vocab_size=vocab.vocab_size, max_predictions_per_seq=max_predictions_per_seq,
        masked_lm_prob=masked_lm_prob, ngram=ngram, favor_shorter_ngram=favor_shorter_ngram,
        do_whole_word_mask=do_whole_word_mask)
    inst_cfg = instances_lib.InstanceConfig(
        masking=mask_cfg, max_seq_length=max_seq_length, dupe_factor=dupe_factor,
        short_seq_prob=short_seq_prob, random_next_sentence=random_next_sentence,
        single_segment_random_negatives=single_segment_random_negatives,
        random_seed=random_seed)
    files = corpus.resolve_input_files(input_files)
    tf.io.gfile.makedirs(output_dir)

    summary = PretrainingDataSummary()
    mine = [s for s in range(num_shards) if s % num_workers == shard_index]
    finals = {s: shard_path(output_dir, s, num_shards, output_compression, file_prefix)
              for s in mine}
    pending = [s for s in mine if not tf.io.gfile.exists(finals[s])]
    summary.shards_already_complete = [finals[s] for s in mine if s not in pending]
    if summary.shards_already_complete:
        logging.info("%d of this worker's %d shards already complete; skipping them.",
                     len(summary.shards_already_complete), len(mine))
    if not pending:
        summary.seconds = time.time() - start_time
        return summary
    logging.info("Worker %d/%d: %d shard(s) to write from %d input file(s).",
                 shard_index, num_workers, len(pending), len(files))

    builder = instances_lib.InstanceBuilder(vocab, inst_cfg)
    dataset = _instance_dataset(files, builder, num_shards, pending, do_lower_case,
                                max_line_bytes, max_document_lines, docs_per_batch,
                                num_parallel_calls)

    # Pass 1: every instance, in document order, to a spill file of its shard.
    buckets = spill_buckets(num_shards)
    for s in pending:
        for stale in tf.io.gfile.glob(_temp_path(finals[s], "spill*")):
            tf.io.gfile.remove(stale)
    spills = {(s, b): _temp_path(finals[s], f"spill-{b:02d}")
              for s in pending for b in range(buckets)}
    writers = {key: tf.io.TFRecordWriter(path) for key, path in spills.items()}
    counts = {s: 0 for s in pending}
    last_log = time.time()
    try:
        for out in dataset.as_numpy_iterator():
            shards = out["doc_id"] % num_shards
            bucket_of = out["shuffle_key"] % buckets
            for record, shard, bucket in zip(out["serialized"], shards.tolist(),
                                             bucket_of.tolist()):
                writers[(shard, bucket)].write(record)
                counts[shard] += 1
            sentences = out["doc_sentences"]
            summary.documents += int(np.sum(sentences >= 2))
            summary.one_sentence_documents += int(np.sum(sentences == 1))
            summary.empty_documents += int(np.sum(sentences == 0))
            summary.skipped_lines_invalid_utf8 += int(np.sum(out["doc_bad_utf8"]))
            summary.skipped_lines_too_long += int(np.sum(out["doc_too_long"]))
            summary.dropped_chunks += int(out["dropped_chunks"])
            summary.instances += len(shards)
            summary.tokens += int(np.sum(out["length"]))
            summary.masked_tokens += int(np.sum(out["num_masked"]))
            summary.label_one += int(np.sum(out["next_sentence_labels"]))
            now = time.time()
            if now - last_log >= progress_interval_s:
                last_log = now
                logging.info("%d instances from %d documents, %.0f instances/s",
                             summary.instances, summary.documents,
                             summary.instances / (now - start_time))
    finally:
        for w in writers.values():
            w.close()

    if summary.instances == 0 and num_workers == 1:
        for path in spills.values():
            tf.io.gfile.remove(path)
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

    # Pass 2: shuffle every spill file (bounded buffer, seeded per shard and
    # file), append to the shard's temporary file, rename when complete.
    options = tf.io.TFRecordOptions(compression_type=output_compression or None)
    for s in pending:
        temp = _temp_path(finals[s], "incomplete")
        paths = [spills[(s, b)] for b in range(buckets)]
        seeds = tf.constant([_shard_seed(random_seed, s * buckets + b) for b in range(buckets)],
                            tf.int64)

        @tf.autograph.experimental.do_not_convert
        def shuffled(path, seed):
            # A stateless permutation of each buffer-sized chunk: unlike
            # Dataset.shuffle(seed=...), it does not depend on the process's
            # global TF seed (tf.random.set_seed elsewhere in the program).
            def permute(index, chunk):
                key = tf.stack([seed, index])
                return tf.data.Dataset.from_tensor_slices(
                    tf.random.experimental.stateless_shuffle(chunk, seed=key))

            return (tf.data.TFRecordDataset(path).batch(shuffle_buffer_size)
                    .enumerate().flat_map(permute))

        records = tf.data.Dataset.from_tensor_slices((paths, seeds)).flat_map(shuffled)
        with tf.io.TFRecordWriter(temp, options) as writer:
            for batch in records.batch(1024).as_numpy_iterator():
                for record in batch:
                    writer.write(record)
        tf.io.gfile.rename(temp, finals[s], overwrite=True)
        for b in range(buckets):
            tf.io.gfile.remove(spills[(s, b)])
        summary.shards_written.append(finals[s])
        logging.info("Wrote %s (%d instances).", finals[s], counts[s])
    summary.seconds = time.time() - start_time
    return summary


def spill_buckets(num_shards: int) -> int:
    """Spill files per shard: a function of num_shards only (determinism), and
    at most ~256 open files in all."""
    return max(1, min(16, 256 // num_shards))


def _shard_seed(seed: int, shard: int) -> int:
    key = random_ops.fold_in(random_ops.fold_in(random_ops.seed_key(seed),
                                                random_ops.SHUFFLE), shard)
    return int(tf.bitwise.right_shift(key, tf.constant(2, tf.uint64)).numpy())


def _instance_dataset(files: List[str], builder: instances_lib.InstanceBuilder,
                      num_shards: int, pending: List[int], do_lower_case: bool,
                      max_line_bytes: int, max_document_lines: int, docs_per_batch: int,
                      num_parallel_calls: Optional[int]) -> tf.data.Dataset:
    """Documents of the pending shards -> batches of serialised instances."""
    wanted = tf.constant([s in set(pending) for s in range(num_shards)])
    docs = corpus.documents_dataset(files, do_lower_case=do_lower_case,
                                    max_line_bytes=max_line_bytes,
                                    max_document_lines=max_document_lines)
    docs = docs.filter(tf.autograph.experimental.do_not_convert(
        lambda e: tf.gather(wanted, e["doc_id"] % num_shards)))
    if builder.config.uses_random_documents:
        # Random other documents come from the same batch: batch per shard, so that
        # a shard's batches do not depend on which other shards this worker has.
        docs = docs.group_by_window(
            key_func=lambda e: e["doc_id"] % num_shards,
            reduce_func=lambda _, window: window.ragged_batch(docs_per_batch),
            window_size=docs_per_batch)
    else:
        docs = docs.ragged_batch(docs_per_batch)

    # No autograph: the code has no tensor-dependent Python control flow, and
    # converting it would triple the start-up (tracing) time.
    @tf.autograph.experimental.do_not_convert
    def process(batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        lines = batch["lines"]
        if not isinstance(lines, tf.RaggedTensor):
            lines = tf.RaggedTensor.from_tensor(lines)
        feats, stats = builder.build(lines, batch["doc_id"])
        return {
            "serialized": tfrecords.serialize_examples(feats),
            "doc_id": feats["doc_id"],
            "length": feats["length"],
            "num_masked": feats["num_masked"],
            "next_sentence_labels": feats["next_sentence_labels"],
            # Which spill file: a keyed hash of the instance, not of its position.
            "shuffle_key": tf.cast(tf.bitwise.right_shift(
                random_ops.fold_in(feats["shuffle_key"], random_ops.SHUFFLE),
                tf.constant(33, tf.uint64)), tf.int64),
            "doc_sentences": stats["sentences"],
            "doc_bad_utf8": batch["bad_utf8"],
            "doc_too_long": batch["too_long"],
            "dropped_chunks": stats["dropped_chunks"],
        }

    calls = tf.data.AUTOTUNE if num_parallel_calls is None else num_parallel_calls
    return docs.map(process, num_parallel_calls=calls, deterministic=True).prefetch(2)
