"""The whole pretraining-data creation: text files -> TFRecord shards.

Modules: run (`create_pretraining_data`, the two passes), config (settings,
summary, file names), spill (spill files, the bounded-open-files router, the
seeded shuffle), manifest (settings and input fingerprints, checked on a rerun).
This page is the design they share.

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

from pipelines.create.config import PretrainingDataConfig, PretrainingDataSummary, shard_path, temp_path
from pipelines.create.manifest import (MANIFEST_SUFFIX, MANIFEST_VERSION, build_manifest, file_fingerprint,
                                       manifest_differences, manifest_path, read_manifest, reconcile_manifest)
from pipelines.create.run import create_pretraining_data, remove_stale_temporaries
from pipelines.create.spill import shard_seed, shuffled_spill, spill_bucket, spill_buckets

# The names pipelines/beam_pipeline.py reads as `create._name` (they are public in their modules now).
_read_manifest = read_manifest
_reconcile_manifest = reconcile_manifest
_remove_stale_temporaries = remove_stale_temporaries
_shard_seed = shard_seed
_temp_path = temp_path

__all__ = [
    "MANIFEST_SUFFIX", "MANIFEST_VERSION", "PretrainingDataConfig", "PretrainingDataSummary", "build_manifest",
    "create_pretraining_data", "file_fingerprint", "manifest_differences", "manifest_path", "read_manifest",
    "reconcile_manifest", "remove_stale_temporaries", "shard_path", "shard_seed", "shuffled_spill",
    "spill_bucket", "spill_buckets", "temp_path",
]
