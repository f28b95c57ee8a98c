"""Pretraining data on Apache Beam: the shards of albert-create-pretraining-data on
Dataflow, Flink, Spark or the DirectRunner (`pip install -e '.[beam]'`; not in one
environment with `[openvino]` or `[bench]`: see setup.py).

The same bytes as the single-machine tool (`pipelines.create`), for the same
inputs, seed, settings and `num_shards`, whatever the runner and the number of
workers: every random choice there is keyed by the document's corpus number,
so the pipeline only has to number the documents as the tool does and put
each shard's instances in the tool's order. The stages:

1. Facts per input file (one worker per file, Beam's `fileio.MatchAll` /
   `ReadMatches`): line count and fingerprint (name, size, SHA-256).
2. The manifest, from those fingerprints, checked against `output_dir` as the
   tool does (`create._reconcile_manifest`: other settings or inputs stop the
   run with every difference named, unless overwrite); it yields the shards
   still to write (existing complete shards are kept: a rerun after a killed
   run writes only the missing ones).
3. Documents per file: its lines grouped with the tool's own step
   (`corpus._group_step`). The tool groups the concatenated corpus in blocks
   of 1024 lines, and a document longer than `max_document_lines` is cut at a
   block end, so each file is grouped with the block phase it has in the
   corpus (prefix sums of the line counts, as a side input) and numbered from
   the document counts of the files before it.
4. Instances: the documents of a shard in windows of `docs_per_batch`
   consecutive ones (the tool's batches for random-document modes; for SOP
   the instances do not depend on the batch), built by `InstanceBuilder`
   with the tool's n-gram masking and serialised.
5. Per (shard, spill bucket) (`create.spill_bucket`): the instances in corpus
   order, permuted chunk by chunk with the tool's keys (`create.shuffled_spill`).
6. Per shard: the buckets in order, written through Beam's `FileSystems`
   under a temporary name and renamed when complete; its size, record count
   and SHA-256 go into the manifest (`shard_manifest.record_shards`, as the
   tool's), all shards' entries in one step.

No worker reads the whole corpus (stages 1 and 3 read one file per worker);
a shard is assembled in one worker's memory (stages 5-6), so choose
`num_shards` to keep shards well under a worker's memory. The file order is
that of `corpus.resolve_input_files` on the launching machine (it lists the
files; it reads them only up to their first non-blank byte).

Example:

>>> summary = create_pretraining_data_beam(
...     ["corpus/*.txt"], "sp.model", "out", PretrainingDataConfig(num_shards=8),
...     beam_args=["--runner=DirectRunner", "--direct_num_workers=2",
...                "--direct_running_mode=multi_processing"])   # doctest: +SKIP
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tempfile
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from absl import logging
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import create
from pipelines import shard_manifest
from pipelines.create import PretrainingDataConfig, PretrainingDataSummary

# corpus.documents_dataset's block size, with which create groups the corpus.
LINES_PER_BLOCK = 1024
_NAMESPACE = "albert-create-pretraining-data"
_COUNTERS = ("documents", "one_sentence_documents", "empty_documents", "instances", "tokens",
             "masked_tokens", "label_one", "skipped_lines_invalid_utf8", "skipped_lines_too_long",
             "dropped_chunks", "shards_written")


# --------------------------------------------------------------------------- reading


class _HashingReader(io.RawIOBase):
    """A binary stream that hashes and counts the raw bytes read through it."""

    def __init__(self, raw):
        super().__init__()
        self.raw, self.sha256, self.bytes = raw, hashlib.sha256(), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(len(buffer))
        self.sha256.update(data)
        self.bytes += len(data)
        buffer[:len(data)] = data
        return len(data)


def _lines(stream) -> Iterator[bytes]:
    """Lines as tf.data.TextLineDataset yields them: split at "\\n", every
    "\\r" removed, no empty line after a final newline."""
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-1]
        yield line.replace(b"\r", b"")


def _open_raw(path: str):
    from apache_beam.io.filesystem import CompressionTypes

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _text_stream(path: str, raw):
    """The decompressed text of a raw stream (`.gz` as the tool reads it)."""
    buffered = io.BufferedReader(raw, 1 << 20)
    return gzip.GzipFile(fileobj=buffered) if path.endswith(".gz") else buffered


def file_facts(path: str) -> Dict[str, object]:
    """{"lines": lines + 1 (the tool's end-of-file sentinel), "fingerprint": the
    manifest entry of the file}, from one read of the file."""
    with _open_raw(path) as raw:
        hashing = _HashingReader(raw)
        count = sum(1 for _ in _lines(_text_stream(path, hashing)))
        # Whatever decompression left unread still belongs to the fingerprint.
        while hashing.read(1 << 20):
            pass
    return {"lines": count + 1, "fingerprint": {"name": os.path.basename(path),
                                                "bytes": hashing.bytes,
                                                "sha256": hashing.sha256.hexdigest()}}


def _prefix_sums(counts: Dict[int, int]) -> Dict[int, int]:
    """{file index: sum of the counts of the files before it}."""
    out, total = {}, 0
    for index in sorted(counts):
        out[index] = total
        total += counts[index]
    return out


_GROUP_STEPS: Dict[int, object] = {}


def _group_step(max_document_lines: int):
    """`corpus._group_step` as one traced function per process (shapes vary)."""
    import tensorflow as tf

    from pipelines import corpus

    if max_document_lines not in _GROUP_STEPS:
        state = (tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([], tf.int64))
        block = (tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None], tf.bool))
        _GROUP_STEPS[max_document_lines] = tf.function(
            corpus._group_step(max_document_lines), input_signature=[state, block])
    return _GROUP_STEPS[max_document_lines]


def file_documents(path: str, phase: int, config: PretrainingDataConfig
                   ) -> Iterator[Tuple[int, List[bytes], int, int]]:
    """(local number, lines, bad UTF-8 lines, too long lines) of each document
    of one file, as `corpus.documents_dataset` groups it when the file's first
    line is at position `phase` of a block."""
    import tensorflow as tf

    from pipelines import corpus

    step = _group_step(config.max_document_lines)
    state = (tf.constant([], tf.string), tf.constant([], tf.int32), tf.constant(0, tf.int64))

    def blocks() -> Iterator[List[bytes]]:
        # Blank lines in front put the file's lines at their corpus positions in
        # the blocks; they make no document (nothing between two blanks).
        block = [b""] * phase
        with _open_raw(path) as raw:
            for line in _lines(_text_stream(path, raw)):
                block.append(line)
                if len(block) == LINES_PER_BLOCK:
                    yield block
                    block = []
        block.append(b"")  # the end of a file ends a document
        yield block

    for block in blocks():
        cleaned = corpus.clean_lines(tf.constant(block, tf.string), config.do_lower_case,
                                     config.max_line_bytes)
        state, (text, row_lengths, doc_ids, bad_utf8, too_long) = step(state, cleaned)
        lines = tf.RaggedTensor.from_row_lengths(text, row_lengths).to_list()
        for i, doc in enumerate(doc_ids.numpy().tolist()):
            yield doc, lines[i], int(bad_utf8[i]), int(too_long[i])


# --------------------------------------------------------------------------- DoFns


def _file_index(index_of: Dict[str, int], path: str) -> int:
    """The corpus position of a matched file (Beam may report it absolute)."""
    return index_of[path] if path in index_of else index_of[os.path.abspath(path)]


class _FileFacts(beam.DoFn):
    def __init__(self, index_of: Dict[str, int]):
        self.index_of = index_of

    def process(self, readable: fileio.ReadableFile):
        path = readable.metadata.path
        yield _file_index(self.index_of, path), file_facts(path)


class _FileDocuments(beam.DoFn):
    """Documents of one file, numbered in corpus order, of the shards to write."""

    def __init__(self, index_of: Dict[str, int], config: PretrainingDataConfig):
        self.index_of, self.config = index_of, config
        self.counters = {name: Metrics.counter(_NAMESPACE, name) for name in _COUNTERS}

    def process(self, readable: fileio.ReadableFile, phases, doc_offsets, pending):
        path = readable.metadata.path
        index = _file_index(self.index_of, path)
        first, wanted = doc_offsets[index], set(pending)
        for local, lines, bad_utf8, too_long in file_documents(path, phases[index] % LINES_PER_BLOCK,
                                                               self.config):
            doc_id = first + local
            shard = doc_id % self.config.num_shards
            if shard not in wanted:
                continue
            self.counters["skipped_lines_invalid_utf8"].inc(bad_utf8)
            self.counters["skipped_lines_too_long"].inc(too_long)
            window = (doc_id // self.config.num_shards) // self.config.docs_per_batch
            yield (shard, window), (doc_id, lines)


class _DocumentCount(beam.DoFn):
    """Documents of one file (the numbering's prefix sums need every file's)."""

    def __init__(self, index_of: Dict[str, int], config: PretrainingDataConfig):
        self.index_of, self.config = index_of, config

    def process(self, readable: fileio.ReadableFile, phases):
        path = readable.metadata.path
        index = _file_index(self.index_of, path)
        yield index, sum(1 for _ in file_documents(path, phases[index] % LINES_PER_BLOCK, self.config))


class _BuildInstances(beam.DoFn):
    """A window of one shard's documents -> ((shard, bucket), (doc_id, order, record))."""

    def __init__(self, spm_proto: bytes, config: PretrainingDataConfig):
        self.spm_proto, self.config = spm_proto, config
        self.counters = {name: Metrics.counter(_NAMESPACE, name) for name in _COUNTERS}

    def setup(self):
        from pipelines import instances as instances_lib
        from pipelines import tokenizer as tokenizer_lib

        vocab = tokenizer_lib.SentencePieceVocab.from_proto(self.spm_proto)
        import tensorflow as tf

        builder = instances_lib.InstanceBuilder(vocab, self.config.instance_config(vocab.vocab_size))
        # One trace for every window (the tool runs it in a tf.data map, also traced).
        self.build = tf.function(builder.build, input_signature=[
            tf.RaggedTensorSpec([None, None], tf.string, ragged_rank=1, row_splits_dtype=tf.int64),
            tf.TensorSpec([None], tf.int64)])
        self.buckets = create.spill_buckets(self.config.num_shards)

    def process(self, element):
        import tensorflow as tf

        from pipelines import tfrecords

        (shard, _), docs = element
        docs = sorted(docs)
        lines = tf.RaggedTensor.from_row_lengths(
            tf.constant([line for _, doc_lines in docs for line in doc_lines], tf.string),
            tf.constant([len(doc_lines) for _, doc_lines in docs], tf.int64))
        doc_ids = tf.constant([doc_id for doc_id, _ in docs], tf.int64)
        feats, stats = self.build(lines, doc_ids)
        records = tfrecords.serialize_examples(feats).numpy()
        buckets = create.spill_bucket(feats["shuffle_key"], self.buckets).numpy()
        self._count(feats, stats)
        for order, (doc_id, bucket, record) in enumerate(zip(feats["doc_id"].numpy(), buckets, records)):
            yield (shard, int(bucket)), (int(doc_id), order, record)

    def _count(self, feats, stats):
        sentences = stats["sentences"].numpy()
        c = self.counters
        c["documents"].inc(int(np.sum(sentences >= 2)))
        c["one_sentence_documents"].inc(int(np.sum(sentences == 1)))
        c["empty_documents"].inc(int(np.sum(sentences == 0)))
        c["dropped_chunks"].inc(int(stats["dropped_chunks"]))
        c["instances"].inc(int(feats["doc_id"].shape[0]))
        c["tokens"].inc(int(np.sum(feats["length"])))
        c["masked_tokens"].inc(int(np.sum(feats["num_masked"])))
        c["label_one"].inc(int(np.sum(feats["next_sentence_labels"])))


def _shuffle_bucket(element, config: PretrainingDataConfig):
    """((shard, bucket), instances) -> (shard, (bucket, records as the shard holds them))."""
    (shard, bucket), instances = element
    ordered = (record for _, _, record in sorted(instances, key=lambda x: (x[0], x[1])))
    buckets = create.spill_buckets(config.num_shards)
    seed = create._shard_seed(config.random_seed, shard * buckets + bucket)
    return shard, (bucket, list(create.shuffled_spill(ordered, seed, config.shuffle_buffer_size)))


class _WriteShard(beam.DoFn):
    """The shard's buckets in order -> its TFRecord file, written under a
    temporary name through Beam's FileSystems and renamed when complete;
    yields (final path, its manifest entry)."""

    def __init__(self, output_dir: str, config: PretrainingDataConfig):
        self.output_dir, self.config = output_dir, config
        self.written = Metrics.counter(_NAMESPACE, "shards_written")

    def process(self, element):
        import tensorflow as tf

        shard, buckets = element
        final = create.shard_path(self.output_dir, shard, self.config.num_shards,
                                  self.config.output_compression, self.config.file_prefix)
        # TensorFlow frames (and compresses) the records, as the tool does;
        # locally first, so that the bytes are the tool's whatever the file system.
        options = tf.io.TFRecordOptions(compression_type=self.config.output_compression or None)
        count = 0
        with tempfile.TemporaryDirectory() as local:
            local_path = os.path.join(local, "shard")
            with tf.io.TFRecordWriter(local_path, options) as writer:
                for _, records in sorted(buckets, key=lambda x: x[0]):
                    for record in records:
                        writer.write(record)
                        count += 1
            entry = shard_manifest.shard_entry(local_path, count)
            temp = create._temp_path(final, "incomplete")
            with tf.io.gfile.GFile(local_path, "rb") as src, FileSystems.create(temp) as dst:
                while True:
                    data = src.read(1 << 22)
                    if not data:
                        break
                    dst.write(data)
        if FileSystems.exists(final):
            FileSystems.delete([final])
        FileSystems.rename([temp], [final])
        self.written.inc()
        yield final, entry


# --------------------------------------------------------------------------- manifest


def _manifest(config: PretrainingDataConfig, input_fingerprints: List[Dict[str, object]],
              spm_fingerprint: Dict[str, object]) -> Dict[str, object]:
    """`create.build_manifest`'s manifest from fingerprints computed elsewhere."""
    return {"format": "albert-tf pretraining data", "version": create.MANIFEST_VERSION,
            "settings": config.content_settings(), "input_files": list(input_fingerprints),
            "spm_model": spm_fingerprint}


def _check_before_launch(output_dir: str, config: PretrainingDataConfig, files: Sequence[str],
                         spm_fingerprint: Dict[str, object], overwrite: bool) -> None:
    """The manifest check on what the launcher knows without reading the corpus
    (settings, vocabulary, input names and sizes), so that a stale output_dir
    fails in one line before any worker starts; the pipeline repeats the
    check with the inputs' SHA-256 (stage 2)."""
    import tensorflow as tf

    path = create.manifest_path(output_dir, config.file_prefix)
    old = None if overwrite else create._read_manifest(path)
    if old is None:
        return
    old_inputs = old.get("input_files") or []
    inputs = []
    for i, name in enumerate(files):
        entry = {"name": os.path.basename(name), "bytes": tf.io.gfile.stat(name).length}
        same = i < len(old_inputs) and all(old_inputs[i].get(k) == v for k, v in entry.items())
        entry["sha256"] = old_inputs[i].get("sha256") if same else "(not read yet)"
        inputs.append(entry)
    diffs = create.manifest_differences(old, _manifest(config, inputs, spm_fingerprint))
    if diffs:
        raise ValueError(
            f"{output_dir} holds shards made with other settings or inputs (from {path}): "
            + "; ".join(diffs) + ". Rerun with --overwrite to replace them, or choose another "
            "output directory.")


def _reconcile(fingerprints: List[Tuple[int, Dict[str, object]]], output_dir: str,
               config: PretrainingDataConfig, spm_fingerprint: Dict[str, object],
               overwrite: bool) -> List[int]:
    """The tool's manifest check on the fingerprints the workers computed;
    returns the shards still to write (their stale temporaries removed)."""
    import tensorflow as tf

    manifest = _manifest(config, [fp for _, fp in sorted(fingerprints, key=lambda x: x[0])],
                         spm_fingerprint)
    shards = list(range(config.num_shards))
    create._reconcile_manifest(output_dir, manifest, config, shards, overwrite)
    finals = {s: create.shard_path(output_dir, s, config.num_shards, config.output_compression,
                                   config.file_prefix) for s in shards}
    pending = [s for s in shards if not tf.io.gfile.exists(finals[s])]
    create._remove_stale_temporaries(output_dir, [finals[s] for s in pending],
                                     os.path.join(output_dir, ".beam-no-staging"))
    return pending


# --------------------------------------------------------------------------- pipeline


def build_pipeline(pipeline: beam.Pipeline, files: Sequence[str], spm_proto: bytes,
                   spm_fingerprint: Dict[str, object], output_dir: str,
                   config: PretrainingDataConfig, overwrite: bool = False) -> beam.PCollection:
    """Adds the stages to `pipeline`; returns the PCollection of written shard
    paths (their manifest entries recorded in one step)."""
    index_of = {p: i for i, path in enumerate(files) for p in {path, os.path.abspath(path)}}
    readable = (pipeline | "Files" >> beam.Create(list(files)) | "Match" >> fileio.MatchAll()
                | "Open" >> fileio.ReadMatches())
    facts = readable | "FileFacts" >> beam.ParDo(_FileFacts(index_of))
    phases = beam.pvalue.AsSingleton(
        facts | "LineCounts" >> beam.Map(lambda kv: (kv[0], kv[1]["lines"]))
        | "AllLineCounts" >> beam.combiners.ToDict()
        | "Phases" >> beam.Map(_prefix_sums))
    pending = beam.pvalue.AsSingleton(
        facts | "Fingerprints" >> beam.Map(lambda kv: (kv[0], kv[1]["fingerprint"]))
        | "AllFingerprints" >> beam.combiners.ToList()
        | "Manifest" >> beam.Map(_reconcile, output_dir, config, spm_fingerprint, overwrite))
    doc_offsets = beam.pvalue.AsSingleton(
        readable | "DocumentCounts" >> beam.ParDo(_DocumentCount(index_of, config), phases)
        | "AllDocumentCounts" >> beam.combiners.ToDict()
        | "DocumentOffsets" >> beam.Map(_prefix_sums))
    buckets = (readable
               | "Documents" >> beam.ParDo(_FileDocuments(index_of, config), phases, doc_offsets, pending)
               | "Windows" >> beam.GroupByKey()
               | "Instances" >> beam.ParDo(_BuildInstances(spm_proto, config))
               | "Buckets" >> beam.GroupByKey()
               | "Shuffle" >> beam.Map(_shuffle_bucket, config))
    # Every shard to write gets a file, also one without instances (as the tool's).
    every_shard = (pipeline | "One" >> beam.Create([None])
                   | "Pending" >> beam.FlatMap(lambda _, shards: [(s, (-1, [])) for s in shards], pending))
    written = ((buckets, every_shard) | "AllBuckets" >> beam.Flatten()
               | "Shards" >> beam.GroupByKey()
               | "Write" >> beam.ParDo(_WriteShard(output_dir, config)))
    _ = (written | "Entries" >> beam.Map(lambda kv: (os.path.basename(kv[0]), kv[1]))
         | "AllEntries" >> beam.combiners.ToDict()
         | "RecordShards" >> beam.Map(
             lambda entries: shard_manifest.record_shards(output_dir, config.file_prefix, entries)))
    return written | "Paths" >> beam.Map(lambda kv: kv[0])


def _counter_value(counter) -> Tuple[Optional[int], Optional[str]]:
    """A counter's committed value where the runner has one (0 included),
    else its attempted value (which counts retried bundles again), else None;
    and which kind it is."""
    for kind in ("committed", "attempted"):
        try:
            value = getattr(counter, kind)
        except Exception:  # runners without that kind of metric may raise  # noqa: BLE001
            continue
        if value is not None:
            return int(value), kind
    return None, None


def _summary(result, seconds: float) -> Tuple[PretrainingDataSummary, Optional[str]]:
    """The counts of the pipeline's metrics, and their kind: "committed",
    "attempted" (some counter has no committed value on this runner: retried
    bundles may be counted twice), or None (the runner reports none of this
    pipeline's counters: the counts stay 0 and mean nothing).

    Informational only: the instances and the shards are the manifest's
    (`_recorded_records`). Never raises: it runs after the pipeline succeeded.
    """
    from apache_beam.metrics.metric import MetricsFilter

    values: Dict[str, Optional[int]] = {name: None for name in _COUNTERS}
    kinds = set()
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(_NAMESPACE))["counters"]
    except Exception as error:  # noqa: BLE001  (a runner without metrics support)
        logging.warning("The runner reports no metrics (%s): the summary's counts are 0.", error)
        counters = []
    for counter in counters:
        value, kind = _counter_value(counter)
        name = counter.key.metric.name
        if value is not None and name in values:
            values[name] = (values[name] or 0) + value
            kinds.add(kind)
    summary = PretrainingDataSummary(seconds=seconds)
    for name in _COUNTERS[:-1]:
        setattr(summary, name, int(values[name] or 0))
    if not kinds:
        return summary, None
    return summary, "attempted" if "attempted" in kinds else "committed"


def _recorded_records(output_dir: str, config: PretrainingDataConfig, paths: Sequence[str]) -> Dict[str, int]:
    """Each shard's record count from the manifest: committed facts (an entry
    is recorded once its shard is complete), whatever metrics the runner
    keeps. A shard without an entry (written by a version without entries)
    is read once and recorded."""
    prefix = config.file_prefix
    shard_manifest.record_shards(output_dir, prefix, shard_manifest.missing_entries(output_dir, prefix, paths))
    entries = (shard_manifest.read_manifest(output_dir, prefix) or {}).get(shard_manifest.SHARDS_KEY) or {}
    return {path: int(entries[os.path.basename(path)]["records"]) for path in paths}


def _stale_output_message(error: BaseException) -> Optional[str]:
    """The manifest check's one-line message inside a runner's error, if any."""
    for line in str(error).splitlines():
        if "--overwrite" in line and "output directory" in line:
            return line.split("ValueError: ", 1)[-1].strip()
    return None


def create_pretraining_data_beam(input_files: Sequence[str], spm_model_file: str, output_dir: str,
                                 config: Optional[PretrainingDataConfig] = None, *,
                                 beam_args: Sequence[str] = (), overwrite: bool = False
                                 ) -> PretrainingDataSummary:
    """Runs the pipeline (see the module docstring) and waits for it.

    Args:
        input_files: files or globs, as `create.create_pretraining_data`'s.
        spm_model_file: the SentencePiece model (read here, sent to the workers).
        output_dir: where the shards and the manifest go (any file system
            Beam and TensorFlow both reach: local, gs://, ...).
        config: the settings (default PretrainingDataConfig()).
        beam_args: Beam pipeline options, e.g. ["--runner=DataflowRunner",
            "--project=P", "--region=R", "--temp_location=gs://..."].
        overwrite: replace shards made with other settings or inputs.

    Returns:
        The summary: instances from the manifest's record counts of the
        shards written in this run (shards_written), the other counts from
        the pipeline's metrics (committed where the runner keeps them).

    Raises:
        FileNotFoundError / ValueError: as the single-machine tool, naming
            the bad input, setting or stale output.
    """
    import time

    import tensorflow as tf

    from pipelines import corpus
    from pipelines import tokenizer as tokenizer_lib

    start = time.time()
    config = config or PretrainingDataConfig()
    vocab = tokenizer_lib.SentencePieceVocab.from_file(spm_model_file)
    config.instance_config(vocab.vocab_size)  # bad settings fail here, before any worker starts
    with tf.io.gfile.GFile(spm_model_file, "rb") as f:
        spm_proto = f.read()
    files = corpus.resolve_input_files(input_files)
    tf.io.gfile.makedirs(output_dir)
    spm_fingerprint = create.file_fingerprint(spm_model_file)
    _check_before_launch(output_dir, config, files, spm_fingerprint, overwrite)
    finals = [create.shard_path(output_dir, s, config.num_shards, config.output_compression,
                                config.file_prefix) for s in range(config.num_shards)]
    complete = set() if overwrite else {p for p in finals if tf.io.gfile.exists(p)}
    options = PipelineOptions(list(beam_args))
    try:
        with beam.Pipeline(options=options) as pipeline:
            build_pipeline(pipeline, files, spm_proto, spm_fingerprint, output_dir, config, overwrite)
    except Exception as error:  # runners wrap the workers' errors in their own types
        stale = _stale_output_message(error)
        if stale:
            raise ValueError(stale) from None
        raise
    summary, kind = _summary(pipeline.result, time.time() - start)
    summary.shards_written = [p for p in finals if p not in complete]
    summary.shards_already_complete = [p for p in finals if p in complete]
    absent = [p for p in finals if not tf.io.gfile.exists(p)]
    if absent:
        raise RuntimeError(f"The pipeline finished but {len(absent)} shard(s) are missing in "
                           f"{output_dir}: {', '.join(os.path.basename(p) for p in absent[:5])}.")
    records = _recorded_records(output_dir, config, finals)
    summary.instances = sum(records[p] for p in summary.shards_written)
    if kind != "committed":
        logging.warning("The runner reports %s: the summary's other counts (documents, tokens...) %s; the "
                        "instances are the manifest's record counts.",
                        "attempted counts only" if kind else "none of the pipeline's counters",
                        "may count retried bundles twice" if kind else "are unknown (shown as 0)")
    if summary.instances == 0 and summary.shards_written:
        # Nothing was made (the shards written hold no record): remove them (and the
        # manifest, unless older shards rely on it), as the tool does.
        for path in summary.shards_written:
            tf.io.gfile.remove(path)
        if not summary.shards_already_complete:
            tf.io.gfile.remove(create.manifest_path(output_dir, config.file_prefix))
        raise ValueError(
            f"No instance could be made from {files[:5]!r}: {summary.documents} usable documents, "
            f"{summary.one_sentence_documents} one-sentence documents skipped. Documents need at "
            "least two sentences (one per line, blank lines between documents).")
    return summary
