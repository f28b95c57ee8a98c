"""Shards against their manifest (pipelines/shard_check.py, pipelines/shard_manifest.py)
and the corrupt-record locator, on hand-made TFRecord files.

References: os.stat / hashlib for sizes and digests, TensorFlow's own TFRecord writer
for the framing and CRCs, and TensorFlow's own DataLossError for the offsets.
"""

import hashlib
import json
import os
import shutil
import struct
import threading

import numpy as np
import pytest
import tensorflow as tf

from pipelines import shard_check, shard_manifest

NUM = 4


def _write(path, num_records, seed):
    rng = np.random.default_rng(seed)
    records = [bytes(rng.integers(0, 256, size=int(rng.integers(20, 200)), dtype=np.uint8))
               for _ in range(num_records)]
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    return records


@pytest.fixture
def shards(tmp_path):
    """NUM shards of a set with a manifest (settings + entries), as the tool leaves them."""
    folder = str(tmp_path / "data")
    os.makedirs(folder)
    paths, records = [], []
    for i in range(NUM):
        path = os.path.join(folder, f"pretrain-{i:05d}-of-{NUM:05d}.tfrecord")
        records.append(_write(path, 10 + i, seed=i))
        paths.append(path)
    manifest = {"format": "albert-tf pretraining data", "version": 1,
                "settings": {"num_shards": NUM, "file_prefix": "pretrain", "output_compression": ""}}
    shard_manifest.write_manifest(shard_manifest.manifest_path(folder, "pretrain"), manifest)
    shard_manifest.record_shards(folder, "pretrain", {
        os.path.basename(p): shard_manifest.shard_entry(p, len(r)) for p, r in zip(paths, records)})
    return folder, paths, records


def test_entries_hold_size_count_and_sha256(shards):
    folder, paths, records = shards
    entries = shard_manifest.read_manifest(folder, "pretrain")["shards"]
    for path, recs in zip(paths, records):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        assert entries[os.path.basename(path)] == {
            "bytes": os.stat(path).st_size, "records": len(recs), "sha256": digest}
        assert shard_manifest.count_records(path) == len(recs)
    assert not [n for n in os.listdir(folder) if n.startswith(".")]  # the lock file is gone


def test_all_good_shards_pass_with_their_record_count(shards):
    folder, paths, records = shards
    for mode in ("size", "full"):
        report = shard_check.check_shards(paths + [os.path.join(folder, "pretrain.manifest.json")], mode)
        assert report.problems == [] and report.checked == NUM and not report.unverified
        assert report.records == sum(len(r) for r in records) == 10 + 11 + 12 + 13


def test_size_check_names_every_truncated_grown_and_missing_shard(shards):
    folder, paths, _ = shards
    size = os.stat(paths[1]).st_size
    with open(paths[1], "r+b") as f:
        f.truncate(size - 7)
    with open(paths[2], "ab") as f:
        f.write(b"x")
    os.remove(paths[3])
    report = shard_check.check_shards(paths[:3], "size")
    assert sorted(report.problems) == sorted([
        f"pretrain-00001-of-00004.tfrecord (size {size - 7}, manifest {size})",
        f"pretrain-00002-of-00004.tfrecord (size {os.stat(paths[2]).st_size}, "
        f"manifest {os.stat(paths[2]).st_size - 1})",
        "pretrain-00003-of-00004.tfrecord (missing)"])
    assert report.verified == [paths[0]] and report.checked == NUM
    line = report.problem_line()
    assert line.startswith("3 of 4 shards do not match their manifest (") and "(missing)" in line
    with pytest.raises(shard_check.ShardCheckError, match=r"^3 of 4 shards do not match"):
        shard_check.verify_input_shards(paths[:3], "size")
    # Opt-in: read anyway (a warning), and "none" checks nothing.
    assert len(shard_check.verify_input_shards(paths[:3], "size", skip_corrupt_records=True).problems) == 3
    assert shard_check.check_shards(paths[:3], "none").problems == []


def test_a_glob_of_part_of_the_set_does_not_report_the_rest_missing(shards):
    _, paths, _ = shards
    report = shard_check.check_shards(paths[:2], "size")
    assert report.problems == [] and report.checked == 2


def test_flipped_bytes_pass_the_size_check_and_fail_the_full_one(shards):
    _, paths, _ = shards
    data = bytearray(open(paths[2], "rb").read())
    data[100] ^= 0xFF
    with open(paths[2], "wb") as f:
        f.write(bytes(data))
    assert shard_check.check_shards(paths, "size").problems == []
    problems = shard_check.check_shards(paths, "full").problems
    assert len(problems) == 1 and problems[0].startswith("pretrain-00002-of-00004.tfrecord (sha256 ")
    assert "same size, other bytes" in problems[0]


def test_shards_without_manifest_or_entries_are_unverified(shards, tmp_path):
    folder, paths, _ = shards
    other = str(tmp_path / "original")
    shutil.copytree(folder, other)
    os.remove(os.path.join(other, "pretrain.manifest.json"))
    copied = sorted(os.path.join(other, n) for n in os.listdir(other))
    plain = str(tmp_path / "part-0.tfrecord")  # not a shard name at all
    _write(plain, 3, seed=9)
    report = shard_check.check_shards(copied + [plain], "full")
    assert report.problems == [] and sorted(report.unverified) == sorted(copied + [plain])
    # A manifest without entries (written by an older version) verifies nothing either.
    with open(os.path.join(other, "pretrain.manifest.json"), "w") as f:
        json.dump({"format": "albert-tf pretraining data", "version": 1}, f)
    assert len(shard_check.check_shards(copied, "size").unverified) == NUM


def _tf_error(path):
    try:
        for _ in tf.data.TFRecordDataset(path):
            pass
    except tf.errors.DataLossError as e:
        return e.message
    return None


def _offset_of(records, index):
    """Byte offset of record `index`: 8 length + 4 CRC + data + 4 CRC per record before it."""
    return sum(12 + len(r) + 4 for r in records[:index])


def test_locate_names_the_file_record_and_offset_of_a_truncated_shard(shards):
    _, paths, records = shards
    cut = _offset_of(records[1], 6) + 12 + 5  # inside record 6's data
    with open(paths[1], "r+b") as f:
        f.truncate(cut)
    message = _tf_error(paths[1])
    assert f"record at {_offset_of(records[1], 6)}" in message  # TensorFlow's offset: record 6
    located = shard_check.locate_corrupt_record("Graph execution error:\n\n" + message, paths)
    assert located == (f"{paths[1]}: record 6 at byte {_offset_of(records[1], 6)} "
                       f"(truncated: 5 of {len(records[1][6])} bytes)")


def test_locate_names_a_record_whose_data_fails_its_crc(shards):
    _, paths, records = shards
    data = bytearray(open(paths[3], "rb").read())
    data[_offset_of(records[3], 4) + 12 + 3] ^= 0x01  # one bit of record 4's data
    with open(paths[3], "wb") as f:
        f.write(bytes(data))
    message = _tf_error(paths[3])
    located = shard_check.locate_corrupt_record(message, paths)
    assert located == f"{paths[3]}: record 4 at byte {_offset_of(records[3], 4)} (its data fails its CRC)"
    # The same offset in the intact files is a good record (or no record): not named.
    assert shard_check.locate_corrupt_record(message, paths[:3]) is None
    assert shard_check.locate_corrupt_record("some other error", paths) is None


def test_readable_records_counts_up_to_the_cut(shards):
    _, paths, records = shards
    assert shard_check.readable_records(paths[0]) == len(records[0])
    with open(paths[0], "r+b") as f:
        f.truncate(_offset_of(records[0], 3) + 12 + 1)
    assert shard_check.readable_records(paths[0]) == 3
    assert sum(1 for _ in tf.data.TFRecordDataset(paths[0]).ignore_errors()) == 3  # what tf.data reads


def test_remote_and_gzipped_shards_are_located_and_counted_as_local_ones(shards):
    """A truncated shard on gs:// (here ram://, reached through tf.io.gfile only) is named and counted
    as the same local file is; a gzipped one is counted on its records, not its bytes."""
    _, paths, records = shards
    with open(paths[1], "r+b") as f:
        f.truncate(_offset_of(records[1], 6) + 12 + 5)
    remote = f"ram://shards-{os.getpid()}-{id(shards)}"
    tf.io.gfile.makedirs(remote)
    remote_paths = [f"{remote}/{os.path.basename(p)}" for p in paths]
    for local, url in zip(paths, remote_paths):
        tf.io.gfile.copy(local, url, overwrite=True)
    message = _tf_error(remote_paths[1])
    assert shard_check.locate_corrupt_record(message, remote_paths) == (
        f"{remote_paths[1]}: record 6 at byte {_offset_of(records[1], 6)} "
        f"(truncated: 5 of {len(records[1][6])} bytes)")
    assert [shard_check.readable_records(u) for u in remote_paths] == [
        len(records[0]), 6, len(records[2]), len(records[3])]

    zipped = f"{remote}/pretrain-00002-of-00004.tfrecord.gz"
    with tf.io.TFRecordWriter(zipped, options="GZIP") as writer:
        for record in records[2]:
            writer.write(record)
    assert shard_check.readable_records(zipped) == len(records[2])


def test_masked_crc_matches_tensorflows_record_header(tmp_path):
    path = str(tmp_path / "one.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(b"hello albert")
    data = open(path, "rb").read()
    length, length_crc = struct.unpack("<QI", data[:12])
    assert length == 12 and shard_check.masked_crc32c(data[:8]) == length_crc
    assert shard_check.masked_crc32c(data[12:24]) == struct.unpack("<I", data[24:28])[0]
    assert shard_check.masked_crc32c(b"hello alberT") != struct.unpack("<I", data[24:28])[0]


def test_concurrent_workers_lose_no_entry(tmp_path):
    folder = str(tmp_path)
    shard_manifest.write_manifest(shard_manifest.manifest_path(folder, "p"), {"version": 1})
    threads = [threading.Thread(target=shard_manifest.record_shards, args=(
        folder, "p", {f"p-{i:05d}-of-00016.tfrecord": {"bytes": i, "records": i, "sha256": "x"}}))
        for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(shard_manifest.read_manifest(folder, "p")["shards"]) == 16
    assert os.listdir(folder) == ["p.manifest.json"]


def test_skip_corrupt_records_reads_the_good_records_before_the_bad_one(tmp_path):
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "albert_tf"))
    import training_testlib as tl
    from pipelines import tfrecords

    good = tl.write_tfrecords(str(tmp_path / "a.tfrecord"), 5, seed=1)
    bad = tl.write_tfrecords(str(tmp_path / "b.tfrecord"), 5, seed=2)
    data = open(bad, "rb").read()
    with open(bad, "wb") as f:
        f.write(data[:len(data) - 30])  # the last record is cut

    def count(skip):
        ds = tfrecords.pretraining_dataset([good, bad], 1, tl.SEQ, tl.PREDS, is_training=False,
                                           skip_corrupt_records=skip)
        return sum(1 for _ in ds)

    assert count(True) == 9
    with pytest.raises(tf.errors.DataLossError, match="truncated record"):
        count(False)


def test_a_missing_or_cut_manifest_is_one_warning_naming_it(shards, caplog):
    """Issue 36 F8: a manifest that is cut, or was not copied with its shards, turned the check off at INFO."""
    import logging

    folder, paths, _ = shards
    manifest = os.path.join(folder, "pretrain.manifest.json")
    with open(manifest) as f:
        text = f.read()
    expected = {"cut": f"Shard manifest {manifest} is unreadable (cut, or not a JSON object): the size of its 4 "
                       "shard(s) is not checked, so a truncated, grown or missing shard is read as it is.",
                "missing": f"Shard manifest {manifest} is missing: the size of its 4 shard(s) is not checked, so a "
                           "truncated, grown or missing shard is read as it is."}
    for fault in ("cut", "missing"):
        if fault == "cut":
            with open(manifest, "w") as f:
                f.write(text[: len(text) // 2])
        else:
            os.remove(manifest)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            report = shard_check.verify_input_shards(paths, "size")
        assert report.problems == [] and len(report.unverified) == NUM
        lines = [(r.levelname, r.getMessage()) for r in caplog.records]
        assert lines == [("WARNING", expected[fault])], lines
