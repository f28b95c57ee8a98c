"""Bad shards met through the installed `albert-pretrain`, as a user meets them (issue 28).

Four shards of a set with the manifest albert-create-pretraining-data writes beside
them (settings, and per shard its size, record count and SHA-256 through the tool's
own `shard_manifest.record_shards`). Then one fault each: a truncated and a missing
shard, a shard with flipped bytes of the right size (caught by --verify_shards=full
before the first step, and by the record CRC during training), a truncated shard
without a manifest (the original tool's output), and --skip_corrupt_records.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

from pipelines import shard_manifest  # noqa: E402

BINARY = os.path.join(os.path.dirname(sys.executable), "albert-pretrain")
NUM = 4
RECORDS = 12


def _name(i):
    return f"pretrain-{i:05d}-of-{NUM:05d}.tfrecord"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("shard_faults")
    folder = str(root / "good")
    os.makedirs(folder)
    entries = {}
    for i in range(NUM):
        path = tl.write_tfrecords(os.path.join(folder, _name(i)), RECORDS, seed=i)
        entries[_name(i)] = shard_manifest.shard_entry(path, RECORDS)
    shard_manifest.write_manifest(shard_manifest.manifest_path(folder, "pretrain"), {
        "format": "albert-tf pretraining data", "version": 1,
        "settings": {"num_shards": NUM, "file_prefix": "pretrain", "output_compression": ""}})
    shard_manifest.record_shards(folder, "pretrain", entries)
    tl.tiny_config().to_json_file(str(root / "albert_config.json"))
    return root


@pytest.fixture
def data(good, tmp_path):
    folder = str(tmp_path / "data")
    shutil.copytree(str(good / "good"), folder)
    return folder


def _pretrain(good, data, out, *extra):
    cmd = [BINARY, f"--albert_config_file={good / 'albert_config.json'}",
           f"--input_file={os.path.join(data, '*')}", f"--output_dir={out}",
           "--train_batch_size=8", "--max_seq_length=16", "--max_predictions_per_seq=3",
           "--num_train_steps=2", "--num_warmup_steps=1", "--save_checkpoints_steps=2",
           "--log_steps=1", "--mixed_precision=float32", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _last_line(proc):
    return proc.stderr.strip().splitlines()[-1]


def _record_offsets(path):
    """Byte offset of each record: 8 length + 4 CRC + data + 4 CRC per record before it."""
    offsets, position = [], 0
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        offsets.append(position)
        position += 12 + len(record) + 4
    return offsets


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_truncated_and_missing_shards_are_named_before_the_first_step(good, data, tmp_path):
    size = os.path.getsize(os.path.join(data, _name(1)))
    with open(os.path.join(data, _name(1)), "r+b") as f:
        f.truncate(1200)
    os.remove(os.path.join(data, _name(3)))
    proc = _pretrain(good, data, tmp_path / "out")
    assert proc.returncode == 1, proc.stderr[-3000:]
    manifest = os.path.join(data, "pretrain.manifest.json")
    assert _last_line(proc) == (
        f"albert-pretrain: 2 of 4 shards do not match their manifest ({manifest}): "
        f"{_name(1)} (size 1200, manifest {size}), {_name(3)} (missing). Delete the bad shards and "
        "rerun albert-create-pretraining-data with the same flags (it writes only missing shards), "
        "or pass --skip_corrupt_records.")
    assert "step 1/" not in proc.stderr and not (tmp_path / "out" / "checkpoint").exists()


def test_flipped_bytes_of_the_right_size_fail_the_full_check(good, data, tmp_path):
    _flip(os.path.join(data, _name(2)), 700)
    proc = _pretrain(good, data, tmp_path / "out", "--verify_shards=full")
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = _last_line(proc)
    assert line.startswith("albert-pretrain: 1 of 4 shards do not match their manifest (")
    assert f"{_name(2)} (sha256 " in line and "same size, other bytes" in line
    assert "step 1/" not in proc.stderr


def test_flipped_bytes_fail_training_naming_the_file_and_record(good, data, tmp_path):
    path = os.path.join(data, _name(2))
    offsets = _record_offsets(path)
    _flip(path, offsets[5] + 12 + 10)  # inside record 5's data: the size check passes
    proc = _pretrain(good, data, tmp_path / "out")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "4 shard(s) match their manifest (size: size): 48 records." in proc.stderr
    assert _last_line(proc) == (
        f"albert-pretrain: Corrupt input data: {path}: record 5 at byte {offsets[5]} (its data "
        "fails its CRC). Delete that shard and recreate it, or pass --skip_corrupt_records to read "
        "on without the rest of its file.")
    assert "Graph execution error" not in proc.stderr


@pytest.fixture
def truncated_without_manifest(data):
    """The issue's fault: the original tool's shards (no manifest), one of them cut."""
    os.remove(os.path.join(data, "pretrain.manifest.json"))
    path = os.path.join(data, _name(1))
    offsets = _record_offsets(path)
    with open(path, "r+b") as f:
        f.truncate(offsets[7] + 12 + 3)
    return data, path, offsets[7]


def test_truncated_shard_without_manifest_is_named_during_training(good, truncated_without_manifest,
                                                                   tmp_path):
    data, path, offset = truncated_without_manifest
    proc = _pretrain(good, data, tmp_path / "out")
    assert proc.returncode == 1, proc.stderr[-3000:]
    # Named shards without their manifest: one warning naming it (issue 36 F8), not the INFO line of plain files.
    assert (f"Shard manifest {os.path.join(data, 'pretrain.manifest.json')} is missing: the size of its 4 shard(s) "
            "is not checked, so a truncated, grown or missing shard is read as it is.") in proc.stderr
    assert "read unverified" not in proc.stderr
    line = _last_line(proc)
    assert line.startswith(f"albert-pretrain: Corrupt input data: {path}: record 7 at byte {offset} "
                           "(truncated: 3 of "), line


def test_skip_corrupt_records_trains_on_and_counts_what_it_skips(good, data, tmp_path):
    path = os.path.join(data, _name(1))
    with open(path, "r+b") as f:
        f.truncate(_record_offsets(path)[7] + 12 + 3)  # records 0-6 whole, 7 cut, 8-11 gone
    proc = _pretrain(good, data, tmp_path / "out", "--skip_corrupt_records")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 of 4 shards do not match their manifest" in proc.stderr
    assert f"--skip_corrupt_records: {_name(1)}: 7 of its 12 records readable, 5 skipped." in proc.stderr
    assert "step 2/2 loss" in proc.stderr
