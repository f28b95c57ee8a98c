"""`albert-pretrain --skip_corrupt_records` names every skip with its file, record and byte (review F11).

A shard without a manifest (so the shard check cannot see it) gets one flipped
byte inside a record's data. Before, tf.data's own warning came from
TensorFlow's C++ log, which the binaries silence (TF_CPP_MIN_LOG_LEVEL=3), and
it named no file: the rest of the shard was dropped in every epoch without a
line. In-process (`main`), the line read from the process's stderr.
"""

import os
import sys

import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402


def _flip_a_byte_of_record(path, index):
    """Inverts the middle byte of record `index`'s data; returns that record's starting byte."""
    lengths = [len(r.numpy()) for r in tf.data.TFRecordDataset(path)]
    start = sum(length + 16 for length in lengths[:index])
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[start + 12 + lengths[index] // 2] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(data))
    return start, len(data)


def test_each_skip_is_logged_with_file_record_and_byte_at_the_default_verbosity(tmp_path, capfd):
    import flags.core_flags as albert_flags
    from albert_tf.bin import pretrain
    from tests.albert_tf.test_remote_paths import _run_main

    argv = tl.pretrain_argv(tmp_path, tmp_path / "run", 3, "--skip_corrupt_records", "--verify_shards=size")
    shard = str(tmp_path / "train.tfrecord")
    start, size = _flip_a_byte_of_record(shard, 20)
    albert_flags.define_all_pretraining_flags()
    capfd.readouterr()
    _run_main(pretrain.main, "albert-pretrain", argv)  # 3 steps of 8 from 20 readable records: several passes
    err = capfd.readouterr().err
    line = (f"WARNING --skip_corrupt_records: {shard}: the rest of the file from record 20 (byte {start} of "
            f"{size}) skipped in every pass over the data: a corrupt or truncated record ends a file's reading.")
    assert err.count(line) == 1, err[-3000:]  # the first pass only
    assert tf.io.gfile.exists(str(tmp_path / "run" / "ckpt-3.index"))
