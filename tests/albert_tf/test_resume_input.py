"""A resume positions the input without reading the consumed records again
(issue 36, F3): the checkpoint saves the input iterator's state
(`albert_tf.training.train_input`).

Constant time is shown without timing: the records the file readers give
during a resume are counted (every `TFRecordDataset` the reader opens is
wrapped in a counting map). A resume at step 40 reads no more than one at
step 2, with static and dynamic masking, and yields the batch an
uninterrupted input yields next. The control (the skip of a checkpoint
without input state, or of an input that cannot be saved) reads what the
steps consumed, so the count can fail; that path logs one line with the
count and an estimate, and is exact too. Under MultiWorkerMirroredStrategy
each worker restores its own position (the chief's from output_dir, the
other's from its scratch checkpoint of the same step).
"""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import pipelines
from albert_tf import training
from albert_tf.training import state as state_lib
from albert_tf.training import train_input

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

from tests.albert_tf.test_preemption import (  # noqa: E402,F401 (workdir: a fixture)
    _assert_same_variables,
    _pretrain_flags,
    _two_workers,
    _variables,
    workdir,
)

BATCH = 8
RECORDS = 128  # two files of 64: 40 steps of 8 cross the data 2.5 times
FAR, NEAR = 40, 2


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume_input")
    for index in range(2):
        tl.write_tfrecords(str(root / f"train-{index}.tfrecord"), RECORDS // 2, seed=index)
    return str(root / "train-*.tfrecord")


@pytest.fixture
def reads(monkeypatch):
    """A counter of the records every TFRecordDataset opened from now on gives."""
    counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    real = tf.data.TFRecordDataset

    def counting(*args, **kwargs):
        def count(record):
            with tf.control_dependencies([counter.assign_add(1)]):
                return tf.identity(record)
        return real(*args, **kwargs).map(count)

    monkeypatch.setattr(tf.data, "TFRecordDataset", counting)
    return counter


def _dataset_fn(pattern, masking, savable=True):
    """The binary's reader (pipelines.pretraining_dataset), files and records
    shuffled; the counter is state outside the pipeline, which tf.data saves
    only when told to ignore it (savable)."""
    options = tf.data.Options()
    options.experimental_external_state_policy = tf.data.experimental.ExternalStatePolicy.IGNORE

    def dataset_fn(ctx):
        dataset = pipelines.pretraining_dataset(
            pattern, ctx.get_per_replica_batch_size(BATCH), tl.SEQ, tl.PREDS, masking=masking, seed=3,
            input_context=ctx, vocab_size=tl.VOCAB, shuffle_buffer_size=16, cycle_length=2)
        return dataset.with_options(options) if savable else dataset

    return dataset_fn


def _saved_after(steps, dataset_fn, prefix):
    """(checkpoint of the input after `steps` steps, the batch of the next step)."""
    inputs = train_input.TrainInput(tf.distribute.get_strategy(), dataset_fn, 0, None, BATCH)
    for _ in range(steps):
        inputs.next_batch(inputs.iterator)
    path = tf.train.Checkpoint(**{train_input.CHECKPOINT_KEY: inputs.saveable}).write(prefix)
    return path, inputs.next_batch(inputs.iterator)


def _resumed_batch(reads, steps, dataset_fn, checkpoint):
    """(records read to resume at `steps` and take one batch, that batch)."""
    reads.assign(0)
    inputs = train_input.TrainInput(tf.distribute.get_strategy(), dataset_fn, steps, checkpoint, BATCH)
    batch = inputs.next_batch(inputs.iterator)
    return int(reads.numpy()), batch


def _assert_same_batch(got, want):
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)


@pytest.mark.parametrize("masking", ["static", "dynamic"])
def test_a_resume_at_step_40_reads_no_more_records_than_at_step_2(shards, reads, tmp_path, masking, caplog,
                                                                   monkeypatch):
    dataset_fn = _dataset_fn(shards, masking)
    counts = {}
    for steps in (NEAR, FAR):
        checkpoint, want = _saved_after(steps, dataset_fn, str(tmp_path / f"input-{steps}"))
        assert train_input.has_input_state(checkpoint)
        counts[steps], got = _resumed_batch(reads, steps, dataset_fn, checkpoint)
        _assert_same_batch(got, want)
    # What does not depend on the step: the check that the input can be saved
    # (a start of the pipeline: shuffle buffer, one element, read-ahead), one
    # step's batch and the read-ahead; far below the 320 records 40 steps consumed.
    assert max(counts.values()) <= 12 * BATCH, counts
    assert counts[FAR] <= counts[NEAR] + 2 * BATCH, counts

    # The control: the same checkpoint read as one of an earlier version (no
    # input state) is resumed by reading the consumed records again.
    monkeypatch.setattr(train_input, "has_input_state", lambda prefix: False)
    caplog.set_level("WARNING")
    skipped, got = _resumed_batch(reads, FAR, dataset_fn, checkpoint)
    _assert_same_batch(got, want)
    assert skipped >= FAR * BATCH, skipped
    lines = [r.getMessage() for r in caplog.records if "reading again" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"Resuming the input by reading again the {FAR * BATCH} records "
                               f"({FAR} batches of {BATCH}) that the completed steps consumed, "), lines[0]
    assert "holds no input position: about " in lines[0] and " records/s)" in lines[0], lines[0]


def test_an_input_that_cannot_be_saved_says_so_and_is_resumed_by_a_skip(shards, reads, caplog):
    # Without IGNORE the counter (state outside the pipeline) makes the
    # iterator unsavable, as a Dataset.from_generator or an unseeded random op would.
    dataset_fn = _dataset_fn(shards, "static", savable=False)
    caplog.set_level("WARNING")
    inputs = train_input.TrainInput(tf.distribute.get_strategy(), dataset_fn, 0, None, BATCH)
    assert inputs.saveable is None
    for _ in range(3):
        inputs.next_batch(inputs.iterator)
    want = inputs.next_batch(inputs.iterator)
    said = [r.getMessage() for r in caplog.records if "cannot be saved" in r.getMessage()]
    assert said and said[0].startswith("The input's position cannot be saved in checkpoints (")
    assert "AssignAddVariableOp is stateful" in said[0]
    skipped, got = _resumed_batch(reads, 3, dataset_fn, None)
    _assert_same_batch(got, want)
    assert skipped >= 3 * BATCH


def test_a_position_saved_by_another_pipeline_is_not_forced_on_this_one(tmp_path, caplog):
    def saved(ctx):
        return tf.data.Dataset.range(1000).shuffle(50, seed=1).batch(4).prefetch(2)

    def changed(ctx):  # a map added before the shuffle: another pipeline
        return tf.data.Dataset.range(1000).map(lambda x: x + 1).shuffle(50, seed=1).batch(4).prefetch(2)

    strategy = tf.distribute.get_strategy()
    path, _ = _saved_after(5, saved, str(tmp_path / "input"))
    caplog.set_level("WARNING")
    got = train_input.TrainInput(strategy, changed, 5, path, 4)
    want = train_input.TrainInput(strategy, changed, 0, None, 4)
    for _ in range(5):
        want.next_batch(want.iterator)
    np.testing.assert_array_equal(got.next_batch(got.iterator), want.next_batch(want.iterator))
    lines = [r.getMessage() for r in caplog.records if "reading again" in r.getMessage()]
    assert len(lines) == 1 and f"the input position in {path} does not fit this input pipeline (" in lines[0]
    assert "{{function_node" not in lines[0]


def test_run_pretraining_saves_the_input_and_resumes_a_checkpoint_without_it_exactly(
        shards, tmp_path, monkeypatch):
    good = _dataset_fn(shards, "dynamic")

    class Killed(Exception):
        pass

    def dies_at(step):
        def callback(logged):
            if logged["step"] == step:
                raise Killed()
        return callback

    def run(output_dir, log_callback=None):
        return training.run_pretraining(
            tl.tiny_config(hidden_dropout_prob=0.1), good, str(output_dir), **tl.pretraining_kwargs(
                train_batch_size=BATCH, num_train_steps=6, num_warmup_steps=1, learning_rate=0.01,
                save_checkpoints_steps=2, log_steps=1, max_seq_length=tl.SEQ,
                max_predictions_per_seq=tl.PREDS, seed=7, handle_preemption=False,
                log_callback=log_callback))

    run(tmp_path / "whole")
    assert train_input.has_input_state(str(tmp_path / "whole" / "ckpt-2"))
    # A checkpoint of an earlier version: no input state in it; the run dies after it.
    with monkeypatch.context() as patch, pytest.raises(Killed):
        patch.setattr(state_lib.TrainState, "attach_input", lambda self, iterator: None)
        run(tmp_path / "old", dies_at(3))
    assert tf.train.latest_checkpoint(str(tmp_path / "old")).endswith("ckpt-2")
    assert not train_input.has_input_state(str(tmp_path / "old" / "ckpt-2"))
    # Resumed by a skip, and killed again after ckpt-4, which holds the input
    # position; then resumed from it.
    with pytest.raises(Killed):
        run(tmp_path / "old", dies_at(5))
    assert train_input.has_input_state(str(tmp_path / "old" / "ckpt-4"))
    run(tmp_path / "old")
    _assert_same_variables(_variables(tmp_path / "old" / "ckpt-6"), _variables(tmp_path / "whole" / "ckpt-6"))


def test_multi_worker_resume_restores_each_workers_own_input_position(workdir, tmp_path):
    mw = ["--strategy=multi_worker_mirrored"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    codes, errs = _two_workers(_pretrain_flags(workdir, stopped, 4, *mw), signal_step=2)
    assert codes == [75, 75], errs[0][-3000:] + errs[1][-3000:]
    scratch = stopped / ".worker-worker-1" / "ckpt-2"
    assert train_input.has_input_state(str(stopped / "ckpt-2")) and train_input.has_input_state(str(scratch))

    codes, errs = _two_workers(_pretrain_flags(workdir, stopped, 4, *mw))
    assert codes == [0, 0], errs[0][-3000:] + errs[1][-3000:]
    assert f"Input position restored from {stopped / 'ckpt-2'} " in errs[0], errs[0][-3000:]
    assert f"Input position restored from {scratch} " in errs[1], errs[1][-3000:]
    codes, errs = _two_workers(_pretrain_flags(workdir, whole, 4, *mw))
    assert codes == [0, 0], errs[0][-3000:] + errs[1][-3000:]
    _assert_same_variables(_variables(stopped / "ckpt-4"), _variables(whole / "ckpt-4"))
