"""A corrupt latest checkpoint: named as a checkpoint, and a resume falls back to the previous complete one.

Through the binaries, as a user meets it: a preempted run's newest checkpoint
gets 64 flipped bytes in its data file (a torn write, a partial copy), and the
same command is run again. Before, `albert-pretrain` ended with "Corrupt input
data ... --skip_corrupt_records reads on" and fine-tuning with a traceback's
last line; neither went back to the checkpoint before (review F7).
"""

import os
import sys

import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from tests.albert_tf import test_preemption as tp  # noqa: E402  (its binaries' wrappers and flags)


def _flip_bytes(prefix):
    """64 bytes 1 kB before the end of the checkpoint's data file, inverted: in the weights and optimizer slots,
    which TensorFlow writes after the input's position (`input/`, the first part of a pretraining checkpoint; a
    checkpoint cut only there keeps its weights, and its input position is read again, as
    tests/albert_tf/test_resume_input.py tests)."""
    path = f"{prefix}.data-00000-of-00001"
    with open(path, "rb") as f:
        data = bytearray(f.read())
    middle = len(data) - 1024  # `input/` is the first entry and most of the file
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    with open(path, "wb") as f:
        f.write(bytes(data))


def _warning_line(stderr, bad, good):
    lines = [line for line in stderr.splitlines() if "The latest checkpoint cannot be read" in line]
    assert len(lines) == 1, stderr[-3000:]
    assert f"{bad} (" in lines[0] and "Checksum does not match" in lines[0], lines[0]
    assert lines[0].endswith(f"Resuming from the previous complete checkpoint {good} instead."), lines[0]


def test_pretrain_resumes_from_the_previous_checkpoint_and_ends_equal_to_an_uninterrupted_run(tmp_path):
    workdir = tmp_path / "work"
    tp.tl.write_tfrecords(str(workdir / "data" / "train-0.tfrecord"), 64, seed=3)
    tp.tl.tiny_config(hidden_dropout_prob=0.1).to_json_file(str(workdir / "albert_config.json"))
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    saves = "--save_checkpoints_steps=2"
    done = tp._plain(tp._pretrain_flags(workdir, whole, 6, saves))
    assert done.returncode == 0, done.stderr[-3000:]
    first = tp._signalled_at(5, tp._pretrain_flags(workdir, stopped, 6, saves))
    assert first.returncode == 75, first.stderr[-3000:]
    _flip_bytes(stopped / "ckpt-5")

    again = tp._plain(tp._pretrain_flags(workdir, stopped, 6, saves))
    assert again.returncode == 0, again.stderr[-3000:]
    _warning_line(again.stderr, stopped / "ckpt-5", stopped / "ckpt-4")
    assert "Resumed from step 4" in again.stderr
    tp._assert_same_variables(tp._variables(stopped / "ckpt-6"), tp._variables(whole / "ckpt-6"))

    # Every checkpoint corrupt: one line naming each, not "Corrupt input data".
    for step in (2, 4, 6):  # ckpt-5 is still the corrupt one
        _flip_bytes(stopped / f"ckpt-{step}")
    last = tp._plain(tp._pretrain_flags(workdir, stopped, 8, saves))
    assert last.returncode == 1
    line = [line for line in last.stderr.splitlines() if line.startswith("albert-pretrain: ")]
    assert len(line) == 1 and line[0].startswith(f"albert-pretrain: No checkpoint in {stopped} can be read: "
                                                 f"{stopped / 'ckpt-6'} (TensorBundle at "), last.stderr[-3000:]
    assert "Corrupt input data" not in last.stderr


def test_finetune_resumes_from_the_previous_resume_state_and_ends_equal_to_an_uninterrupted_run(
        tmp_path, finetuned_sst2):
    root, whole, stopped = finetuned_sst2["root"], finetuned_sst2["model"], tmp_path / "stopped"
    # Step 6 ends the first Keras epoch (a save), step 8 is the signal's save: the two kept.
    first = tp._run([sys.executable, "-c", tp._FINETUNE_SIGNALLED_AT, "8"] + tp._finetune_flags(root, stopped))
    assert first.returncode == 75, first.stderr[-3000:]
    resume = stopped / "resume"
    _flip_bytes(resume / "ckpt-8")
    again = tp._run([sys.executable, "-m", "albert_tf.bin.finetune"] + tp._finetune_flags(root, stopped))
    assert again.returncode == 0, again.stderr[-3000:]
    _warning_line(again.stderr, resume / "ckpt-8", resume / "ckpt-6")
    tp._assert_same_variables(tp._resume_state(stopped), tp._resume_state(whole))


def test_a_corrupt_checkpoint_given_to_a_binary_is_named_as_a_checkpoint(tmp_path):
    from albert_tf.bin import faults

    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(tf.range(1000.0))), str(tmp_path), 1)
    prefix = manager.save(1)
    _flip_bytes(prefix)
    with pytest.raises(tf.errors.DataLossError) as error:
        tf.train.Checkpoint(v=tf.Variable(tf.zeros(1000))).restore(prefix)
    message = faults.fault_message(error.value, {})
    assert message.startswith(f"Corrupt checkpoint {prefix}: TensorBundle at {prefix} shard 0 (4000 bytes): "
                              "Checksum does not match: stored "), message
    assert message.endswith(". Restore it from a copy, or move it away and take an earlier checkpoint of its "
                            "folder."), message
