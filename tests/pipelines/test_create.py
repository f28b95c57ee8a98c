"""End-to-end creation: determinism across runs and worker splits, crash
safety, bad inputs, the summary, the binary, and the original's reader."""

import glob
import gzip
import json
import os
import shutil
import subprocess
import textwrap
import sys

import numpy as np
import pytest
import tensorflow as tf

import pipelines

from .conftest import write_corpus

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2, num_shards=3,
                random_seed=7, docs_per_batch=8)


def shard_bytes(directory):
    files = sorted(glob.glob(os.path.join(directory, "pretrain-*")))
    return {os.path.basename(f): open(f, "rb").read() for f in files}


def manifest_text(directory):
    with open(os.path.join(directory, "pretrain.manifest.json")) as f:
        return f.read()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, corpus_file, spm_model):
    out = str(tmp_path_factory.mktemp("baseline"))
    summary = pipelines.create_pretraining_data([corpus_file], spm_model, out, **SETTINGS)
    return out, summary


def test_summary_counts(baseline, corpus_file):
    out, summary = baseline
    files = shard_bytes(out)
    assert sorted(files) == [f"pretrain-0000{i}-of-00003.tfrecord" for i in range(3)]
    records = sum(1 for f in glob.glob(os.path.join(out, "pretrain-*"))
                  for _ in tf.data.TFRecordDataset(f))
    assert records == summary.instances > 0
    assert summary.documents == 120  # conftest writes 120 documents of >= 2 sentences
    assert 0.1 < summary.masked_fraction < 0.16
    assert abs(summary.sop_label_one_fraction - 0.5) < 4 * np.sqrt(0.25 / summary.instances)
    assert not glob.glob(os.path.join(out, ".*"))  # no temporary files left
    text = summary.to_text()
    for word in ("documents", "instances", "tokens", "masked fraction", "skipped lines",
                 "instances/s"):
        assert word in text


def test_two_runs_are_byte_identical(baseline, tmp_path, corpus_file, spm_model):
    out, _ = baseline
    # The same settings as a config object; batching and parallelism change nothing.
    # progress_interval_s=0: progress after every batch of 5 documents.
    config = pipelines.PretrainingDataConfig(**dict(SETTINGS, docs_per_batch=5),
                                             num_parallel_calls=1, progress_interval_s=0.0)
    seen = []
    summary = pipelines.create_pretraining_data(
        [corpus_file], spm_model, str(tmp_path), config,
        progress=lambda s: seen.append((s.documents, s.instances, s.seconds)))
    assert shard_bytes(str(tmp_path)) == shard_bytes(out)
    # The running summary, once per batch: 120 documents in 24 batches, counts growing to the final ones.
    assert len(seen) == 24 and [d for d, _, _ in seen] == list(range(5, 121, 5))
    assert seen[-1][1] == summary.instances and all(a[1] <= b[1] for a, b in zip(seen, seen[1:]))
    assert all(0 < t <= summary.seconds for _, _, t in seen)
    # docs_per_batch does not change SOP shards, so it is not in the manifest.
    assert manifest_text(str(tmp_path)) == manifest_text(out)


def test_worker_split_equals_single_run(baseline, tmp_path, corpus_file, spm_model):
    out, summary = baseline
    parts = [pipelines.create_pretraining_data([corpus_file], spm_model, str(tmp_path),
                                               shard_index=i, num_workers=2, **SETTINGS)
             for i in range(2)]
    assert shard_bytes(str(tmp_path)) == shard_bytes(out)
    assert manifest_text(str(tmp_path)) == manifest_text(out)  # no worker-specific field
    assert sum(p.instances for p in parts) == summary.instances
    assert [len(p.shards_written) for p in parts] == [2, 1]


def test_rerun_after_interruption_finishes_only_missing_shards(baseline, tmp_path, corpus_file,
                                                                spm_model):
    out, _ = baseline
    want = shard_bytes(out)
    target = str(tmp_path)
    # A complete shard from before, a leftover temporary file and spill of a
    # shard that was being written, and a missing shard.
    done = "pretrain-00000-of-00003.tfrecord"
    with open(os.path.join(target, done), "wb") as f:
        f.write(want[done])
    shutil.copy(os.path.join(out, "pretrain.manifest.json"), target)
    os.utime(os.path.join(target, done), (1_000_000_000, 1_000_000_000))
    with open(os.path.join(target, ".pretrain-00001-of-00003.tfrecord.incomplete"), "wb") as f:
        f.write(want["pretrain-00001-of-00003.tfrecord"][:100])
    with open(os.path.join(target, ".pretrain-00001-of-00003.tfrecord.spill"), "wb") as f:
        f.write(b"garbage")
    with open(os.path.join(target, ".pretrain-w00000-staging-000000-000016"), "wb") as f:
        f.write(b"garbage")  # a staging file (many shards, few open files)
    summary = pipelines.create_pretraining_data([corpus_file], spm_model, target, **SETTINGS)
    assert shard_bytes(target) == want
    assert os.path.getmtime(os.path.join(target, done)) == 1_000_000_000  # left alone
    assert len(summary.shards_written) == 2 and len(summary.shards_already_complete) == 1
    assert not glob.glob(os.path.join(target, ".*"))
    again = pipelines.create_pretraining_data([corpus_file], spm_model, target, **SETTINGS)
    assert again.shards_written == [] and again.instances == 0


def test_reader_reads_the_output_directory_with_a_broad_glob(baseline):
    out, summary = baseline
    # data/* matches the manifest too: the reader leaves it out.
    ds = pipelines.pretraining_dataset(os.path.join(out, "*"), 64, 64, 10, is_training=False)
    assert sum(int(b["input_ids"].shape[0]) for b in ds) == summary.instances


def test_records_parse_with_the_original_spec(baseline):
    out, _ = baseline
    path = sorted(glob.glob(os.path.join(out, "pretrain-*")))[0]
    # The original run_pretraining's name_to_features (token_boundary not read).
    spec = {
        "input_ids": tf.io.FixedLenFeature([64], tf.int64),
        "input_mask": tf.io.FixedLenFeature([64], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([64], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([10], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([10], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([10], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }
    for record in tf.data.TFRecordDataset(path).take(20):
        parsed = tf.io.parse_single_example(record, spec)
        ex = tf.train.Example.FromString(record.numpy())
        names = list(ex.features.feature.keys())
        assert sorted(names) == sorted(pipelines.FEATURE_NAMES)
        boundary = ex.features.feature["token_boundary"].int64_list.value
        assert len(boundary) == 64
        weights = parsed["masked_lm_weights"].numpy()
        num = int(weights.sum())
        pos = parsed["masked_lm_positions"].numpy()[:num]
        assert (parsed["input_mask"].numpy()[pos] == 1).all()
        # Kinds and lengths exactly as the original writes them.
        for name in pipelines.FEATURE_NAMES:
            feature = ex.features.feature[name]
            kind = "float_list" if name == "masked_lm_weights" else "int64_list"
            assert feature.WhichOneof("kind") == kind
            want = 1 if name == "next_sentence_labels" else (
                10 if name.startswith("masked_lm") else 64)
            assert len(getattr(feature, kind).value) == want


def test_gzip_output_and_gzip_input(tmp_path, corpus_file, spm_model, baseline):
    out, _ = baseline
    gz_in = str(tmp_path / "corpus.txt.gz")
    with open(corpus_file, "rb") as src, gzip.open(gz_in, "wb") as dst:
        dst.write(src.read())
    target = str(tmp_path / "gz")
    pipelines.create_pretraining_data([gz_in], spm_model, target, output_compression="GZIP",
                                      **SETTINGS)
    files = sorted(glob.glob(os.path.join(target, "pretrain-*.tfrecord.gz")))
    assert len(files) == 3
    plain = sorted(glob.glob(os.path.join(out, "pretrain-*")))
    for gz_file, plain_file in zip(files, plain):
        a = [r.numpy() for r in tf.data.TFRecordDataset(gz_file, compression_type="GZIP")]
        b = [r.numpy() for r in tf.data.TFRecordDataset(plain_file)]
        assert a == b


# --------------------------------------------------------------------------- bad input


def small_settings(**overrides):
    return {**SETTINGS, "num_shards": 1, "dupe_factor": 1, **overrides}


def test_missing_input_files(tmp_path, spm_model):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        pipelines.create_pretraining_data([str(tmp_path / "nothing-here*.txt")], spm_model,
                                          str(tmp_path / "o"), **small_settings())


def test_empty_corpus(tmp_path, spm_model):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n\t\n")
    with pytest.raises(ValueError, match="Empty corpus"):
        pipelines.create_pretraining_data([str(empty)], spm_model, str(tmp_path / "o"),
                                          **small_settings())


def test_bad_lines_are_skipped_and_counted(tmp_path, spm_model):
    path = tmp_path / "bad.txt"
    write_corpus(str(path), num_docs=6, seed=4)
    good = path.read_bytes()
    # Insert a non-UTF-8 line and a 1 MB line inside the first document.
    first_break = good.index(b"\n") + 1
    data = (good[:first_break] + b"caf\xe9 \xff\xfe broken\n" + b"x" * (1 << 20) + b"\n"
            + good[first_break:])
    path.write_bytes(data)
    summary = pipelines.create_pretraining_data([str(path)], spm_model, str(tmp_path / "o"),
                                                **small_settings())
    assert summary.skipped_lines_invalid_utf8 == 1
    assert summary.skipped_lines_too_long == 1
    assert summary.documents == 6 and summary.instances > 0
    # Without the bad lines the output is the same as for the clean file.
    clean = tmp_path / "clean.txt"
    clean.write_bytes(good)
    pipelines.create_pretraining_data([str(clean)], spm_model, str(tmp_path / "c"),
                                      **small_settings())
    assert list(shard_bytes(str(tmp_path / "o")).values()) == \
        list(shard_bytes(str(tmp_path / "c")).values())


def test_one_sentence_documents(tmp_path, spm_model):
    path = tmp_path / "single.txt"
    path.write_text("ka lo mi ten.\n\nser qua vi don.\n\npra el nu.\n")
    with pytest.raises(ValueError, match="one-sentence documents skipped"):
        pipelines.create_pretraining_data([str(path)], spm_model, str(tmp_path / "o"),
                                          **small_settings())
    assert not glob.glob(str(tmp_path / "o" / "pretrain-*"))
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("ka lo mi ten.\n\nser qua vi don.\npra el nu.\n")
    summary = pipelines.create_pretraining_data([str(mixed)], spm_model, str(tmp_path / "m"),
                                                **small_settings())
    assert summary.one_sentence_documents == 1 and summary.documents == 1


def test_vocab_without_special_pieces(tmp_path, corpus_file):
    import sentencepiece as spm

    prefix = str(tmp_path / "plain")
    spm.SentencePieceTrainer.train(input=corpus_file, model_prefix=prefix, vocab_size=60,
                                   minloglevel=2)
    with pytest.raises(ValueError, match=r"special pieces.*\[CLS\]"):
        pipelines.create_pretraining_data([corpus_file], prefix + ".model", str(tmp_path / "o"),
                                          **small_settings())


def test_max_seq_length_too_small(tmp_path, corpus_file, spm_model):
    with pytest.raises(ValueError, match="max_seq_length must be >= 5.*got 4"):
        pipelines.create_pretraining_data([corpus_file], spm_model, str(tmp_path / "o"),
                                          **small_settings(max_seq_length=4))
    # The smallest legal length works: [CLS] a [SEP] b [SEP].
    summary = pipelines.create_pretraining_data([corpus_file], spm_model, str(tmp_path / "o5"),
                                                **small_settings(max_seq_length=5))
    assert summary.instances > 0


def test_binary_end_to_end(tmp_path, corpus_file, spm_model, baseline):
    out, _ = baseline
    target = str(tmp_path / "cli")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [sys.executable, "-m", "pipelines.bin.create_pretraining_data",
           f"--input_file={corpus_file}", f"--spm_model_file={spm_model}",
           f"--output_dir={target}", "--max_seq_length=64", "--max_predictions_per_seq=10",
           "--dupe_factor=2", "--num_shards=3", "--random_seed=7"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "instances:" in done.stderr and "masked fraction" in done.stderr
    assert shard_bytes(target) == shard_bytes(out)
    bad = subprocess.run(cmd[:3] + [f"--input_file={tmp_path}/missing.txt"] + cmd[4:],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 1 and "No input file matches" in bad.stderr
    assert "Traceback" not in bad.stderr
    # Other settings in the same directory: one line naming them; --overwrite replaces.
    other = subprocess.run(cmd[:-1] + ["--random_seed=8"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert other.returncode == 1, other.stderr[-3000:]
    assert "setting random_seed: old 7, new 8" in other.stderr and "--overwrite" in other.stderr
    assert "Traceback" not in other.stderr
    assert shard_bytes(target) == shard_bytes(out)


def test_nsp_mode_worker_split_equals_single_run(tmp_path, corpus_file, spm_model):
    # Random-document negatives draw from documents of the same shard, so the
    # worker split still reproduces the single run.
    settings = dict(SETTINGS, num_shards=2, dupe_factor=1, random_next_sentence=True)
    single = pipelines.create_pretraining_data([corpus_file], spm_model, str(tmp_path / "one"),
                                               **settings)
    for i in range(2):
        pipelines.create_pretraining_data([corpus_file], spm_model, str(tmp_path / "two"),
                                          shard_index=i, num_workers=2, **settings)
    assert shard_bytes(str(tmp_path / "one")) == shard_bytes(str(tmp_path / "two"))
    assert 0.5 <= single.sop_label_one_fraction < 0.8


def test_output_ignores_the_global_tf_seed(baseline, tmp_path, corpus_file, spm_model):
    # Other code in the same process (a training loop, keras.utils.set_random_seed)
    # may set TensorFlow's global seed; the shards must not change with it.
    out, _ = baseline
    tf.random.set_seed(987)
    try:
        pipelines.create_pretraining_data([corpus_file], spm_model, str(tmp_path), **SETTINGS)
    finally:
        tf.random.set_seed(None)
    assert shard_bytes(str(tmp_path)) == shard_bytes(out)


# --------------------------------------------------------------------------- manifest


def test_manifest_records_settings_and_input_fingerprints(baseline, corpus_file, spm_model):
    import hashlib

    out, _ = baseline
    manifest = json.loads(manifest_text(out))
    for name, value in SETTINGS.items():
        if name != "docs_per_batch":  # speed only in SOP mode
            assert manifest["settings"][name] == value, name
    assert "docs_per_batch" not in manifest["settings"]
    assert manifest["settings"]["shuffle_buffer_size"] == 100_000  # defaults recorded too
    with open(corpus_file, "rb") as f:
        corpus_bytes = f.read()
    assert manifest["input_files"] == [{
        "name": "corpus.txt", "bytes": len(corpus_bytes),
        "sha256": hashlib.sha256(corpus_bytes).hexdigest()}]
    with open(spm_model, "rb") as f:
        assert manifest["spm_model"]["sha256"] == hashlib.sha256(f.read()).hexdigest()


def test_manifest_records_every_shards_size_record_count_and_sha256(baseline):
    import hashlib

    out, summary = baseline
    entries = json.loads(manifest_text(out))["shards"]
    assert sorted(entries) == [f"pretrain-0000{i}-of-00003.tfrecord" for i in range(3)]
    for name, entry in entries.items():
        path = os.path.join(out, name)
        with open(path, "rb") as f:
            data = f.read()
        assert entry == {"bytes": len(data), "records": sum(1 for _ in tf.data.TFRecordDataset(path)),
                         "sha256": hashlib.sha256(data).hexdigest()}, name
    assert sum(entry["records"] for entry in entries.values()) == summary.instances


def test_rerun_adds_entries_for_complete_shards_an_older_manifest_lacks(baseline, tmp_path,
                                                                       corpus_file, spm_model):
    out, _ = baseline
    target = str(tmp_path / "old")
    shutil.copytree(out, target)
    path = os.path.join(target, "pretrain.manifest.json")
    manifest = json.loads(manifest_text(target))
    del manifest["shards"]  # as a version without shard entries wrote it
    with open(path, "w") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    summary = pipelines.create_pretraining_data([corpus_file], spm_model, target, **SETTINGS)
    assert summary.shards_written == [] and len(summary.shards_already_complete) == 3
    assert manifest_text(target) == manifest_text(out)


def test_rerun_with_other_settings_is_an_error_unless_overwrite(tmp_path, corpus_file,
                                                                 spm_model):
    target = str(tmp_path / "o")
    pipelines.create_pretraining_data([corpus_file], spm_model, target,
                                      **small_settings(num_shards=2))
    before = shard_bytes(target)
    with pytest.raises(ValueError) as error:
        pipelines.create_pretraining_data([corpus_file], spm_model, target,
                                          **small_settings(num_shards=2, random_seed=8,
                                                           masked_lm_prob=0.2))
    message = str(error.value)
    assert "setting random_seed: old 7, new 8" in message
    assert "setting masked_lm_prob: old 0.15, new 0.2" in message
    assert "max_seq_length" not in message  # only what differs
    assert "--overwrite" in message
    assert shard_bytes(target) == before  # nothing touched
    # Another shard count: also an error (names differ, old code reused nothing
    # but left a mixed directory); with overwrite the old shards go.
    with pytest.raises(ValueError, match="setting num_shards: old 2, new 1"):
        pipelines.create_pretraining_data([corpus_file], spm_model, target,
                                          **small_settings(random_seed=8))
    summary = pipelines.create_pretraining_data([corpus_file], spm_model, target,
                                                overwrite=True, **small_settings(random_seed=8))
    fresh = str(tmp_path / "fresh")
    pipelines.create_pretraining_data([corpus_file], spm_model, fresh,
                                      **small_settings(random_seed=8))
    assert shard_bytes(target) == shard_bytes(fresh)
    assert list(shard_bytes(target)) == ["pretrain-00000-of-00001.tfrecord"]
    assert manifest_text(target) == manifest_text(fresh)
    assert len(summary.shards_written) == 1
    assert not glob.glob(os.path.join(target, ".*"))


def test_same_settings_in_place_of_old_shards_are_rewritten_with_overwrite(
        tmp_path, corpus_file, spm_model):
    # Same shard names, other seed: the very case where old code resumed silently.
    target = str(tmp_path / "o")
    pipelines.create_pretraining_data([corpus_file], spm_model, target, **small_settings())
    old = shard_bytes(target)
    pipelines.create_pretraining_data([corpus_file], spm_model, target, overwrite=True,
                                      **small_settings(random_seed=9))
    new = shard_bytes(target)
    assert list(new) == list(old) and new != old
    # The same settings again: resume (nothing to do), no error.
    again = pipelines.create_pretraining_data([corpus_file], spm_model, target,
                                              **small_settings(random_seed=9))
    assert again.shards_written == [] and len(again.shards_already_complete) == 1


def test_rerun_with_other_inputs_is_an_error(tmp_path, corpus_file, spm_model):
    target = str(tmp_path / "o")
    corpus_copy = str(tmp_path / "corpus.txt")
    shutil.copy(corpus_file, corpus_copy)
    pipelines.create_pretraining_data([corpus_copy], spm_model, target, **small_settings())
    # The same content elsewhere is the same input: resume.
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(corpus_copy, moved / "corpus.txt")
    pipelines.create_pretraining_data([str(moved / "corpus.txt")], spm_model, target,
                                      **small_settings())
    with open(corpus_copy, "a") as f:
        f.write("Ka lo mi ten.\nSer qua vi don.\n\n")
    with pytest.raises(ValueError, match=r"input file 1: old corpus\.txt \(\d+ bytes, sha256 "
                                         r"[0-9a-f]{12}\), new corpus\.txt"):
        pipelines.create_pretraining_data([corpus_copy], spm_model, target, **small_settings())
    other_model = str(tmp_path / "other.model")
    shutil.copy(spm_model, other_model)
    with pytest.raises(ValueError, match=r"SentencePiece model: old sp\.model.*new other\.model"):
        pipelines.create_pretraining_data([str(moved / "corpus.txt")], other_model, target,
                                          **small_settings())
    with pytest.raises(ValueError, match=r"input files: old 1 file\(s\), new 2"):
        pipelines.create_pretraining_data([str(moved / "corpus.txt"), corpus_copy], spm_model,
                                          target, **small_settings())


def test_shards_without_manifest_or_unreadable_manifest_need_overwrite(
        baseline, tmp_path, corpus_file, spm_model):
    out, _ = baseline
    target = str(tmp_path)
    name = "pretrain-00001-of-00003.tfrecord"
    shutil.copy(os.path.join(out, name), target)  # e.g. written by an older version
    with pytest.raises(ValueError, match=f"1 shard.*{name}.*but no manifest.*--overwrite"):
        pipelines.create_pretraining_data([corpus_file], spm_model, target, **SETTINGS)
    with open(os.path.join(target, "pretrain.manifest.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match="manifest format: old 'unreadable"):
        pipelines.create_pretraining_data([corpus_file], spm_model, target, **SETTINGS)


def test_worker_split_with_overwrite_replaces_everything(baseline, tmp_path, corpus_file,
                                                        spm_model):
    out, _ = baseline
    target = str(tmp_path)
    pipelines.create_pretraining_data([corpus_file], spm_model, target,
                                      **dict(SETTINGS, random_seed=3, num_shards=4, dupe_factor=1))
    for i in range(2):  # each worker replaces its own shards and the 4-shard set
        pipelines.create_pretraining_data([corpus_file], spm_model, target, shard_index=i,
                                          num_workers=2, overwrite=True, **SETTINGS)
    assert shard_bytes(target) == shard_bytes(out)
    assert manifest_text(target) == manifest_text(out)


def test_unknown_setting_is_named(tmp_path, corpus_file, spm_model):
    with pytest.raises(TypeError, match="max_seq_len'"):
        pipelines.create_pretraining_data([corpus_file], spm_model, str(tmp_path),
                                          max_seq_len=64)


# --------------------------------------------------------------------------- open files


def test_spill_router_keeps_order_with_few_open_files(tmp_path):
    from pipelines.create import spill

    rng = np.random.default_rng(0)
    paths = [str(tmp_path / f"spill-{i}") for i in range(11)]
    writes = [(int(rng.integers(11)), f"record {n}".encode()) for n in range(500)]
    # max_open=2: 11 files need three levels of staging files.
    router = spill.SpillRouter(paths, str(tmp_path / ".staging"), max_open=2)
    for index, record in writes:
        router.write(index, record)
    router.finish()
    for i, path in enumerate(paths):
        got = list(spill.read_framed(path))
        assert got == [record for index, record in writes if index == i]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in paths)


@pytest.mark.parametrize("max_open", [2, 16])
def test_framed_chunks_from_the_graph_match_per_record_writes(tmp_path, max_open):
    # spill_chunks frames and joins in the graph what FramedWriter.write
    # frames one record at a time: the spill files must be byte-identical,
    # directly written (max_open=16) or through staging files (max_open=2).
    import tensorflow as tf

    from pipelines.create import spill

    rng = np.random.default_rng(1)
    batches = []
    for _ in range(4):
        size = int(rng.integers(0, 40))
        # Lengths across the one-byte boundary of the length header (255/256).
        records = [bytes(rng.integers(0, 256, int(rng.choice([0, 3, 255, 256, 300]))))
                   for _ in range(size)]
        batches.append((records, rng.integers(0, 5, size)))
    paths = {kind: [str(tmp_path / f"{kind}-{i}") for i in range(5)] for kind in ("a", "b")}
    one_by_one = spill.SpillRouter(paths["a"], str(tmp_path / ".sa"), max_open=max_open)
    joined = spill.SpillRouter(paths["b"], str(tmp_path / ".sb"), max_open=max_open)
    for records, targets in batches:
        for record, index in zip(records, targets.tolist()):
            one_by_one.write(index, record)
        chunks, sizes = spill.spill_chunks(tf.constant(records, tf.string, shape=[len(records)]),
                                           tf.constant(targets, tf.int64), 5)
        assert sizes.numpy().tolist() == np.bincount(targets, minlength=5).tolist()
        for index in np.flatnonzero(sizes.numpy()).tolist():
            joined.write_framed(index, chunks.numpy()[index])
    one_by_one.finish()
    joined.finish()
    for a, b in zip(paths["a"], paths["b"]):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()


def test_read_framed_across_block_boundaries(tmp_path):
    from pipelines.create import spill

    records = [b"", b"x" * 5, b"y" * 20, b"z"]
    path = str(tmp_path / "spill")
    writer = spill.FramedWriter(path)
    for record in records:
        writer.write(record)
    writer.close()
    for block in (1, 3, 8, 9, 1 << 20):
        assert list(spill.read_framed(path, block_bytes=block)) == records
    with open(path, "ab") as f:
        f.write(b"\x05\x00")  # a partial header: a truncated file is an error
    with pytest.raises(ValueError, match="Truncated spill file"):
        list(spill.read_framed(path, block_bytes=4))


BOUNDED_FILES_SCRIPT = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    import pipelines
    corpus, spm_model, output_dir = sys.argv[1:4]
    pipelines.create_pretraining_data([corpus], spm_model, output_dir, max_seq_length=32,
                                      max_predictions_per_seq=5, dupe_factor=1,
                                      num_shards=300, random_seed=7)
""")


def test_many_shards_under_a_low_open_file_limit(tmp_path, spm_model, monkeypatch):
    # 300 shards with `ulimit -n 64`: old code opened one writer per shard and
    # failed with "Too many open files".
    from pipelines.create import spill

    small = write_corpus(str(tmp_path / "small.txt"), num_docs=40, seed=3)
    limited = str(tmp_path / "limited")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", BOUNDED_FILES_SCRIPT, small, spm_model, limited],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # The same shards as writing every spill file directly (no open-file limit).
    monkeypatch.setattr(spill, "max_open_writers", lambda: 1000)
    direct = str(tmp_path / "direct")
    pipelines.create_pretraining_data([small], spm_model, direct, max_seq_length=32,
                                      max_predictions_per_seq=5, dupe_factor=1,
                                      num_shards=300, random_seed=7)
    want = shard_bytes(direct)
    assert len(want) == 300 and sum(len(b) > 0 for b in want.values()) >= 30
    assert shard_bytes(limited) == want
    assert not glob.glob(os.path.join(limited, ".*"))


def test_max_open_writers_follows_the_open_file_limit():
    import resource

    from pipelines.create import spill

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))
        assert spill.max_open_writers() == (100 - 32) // 2
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert spill.max_open_writers() <= spill.MAX_OPEN_WRITERS == 256
