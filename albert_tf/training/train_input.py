"""The training input of one worker, and its position in the checkpoints.

A resumed run continues at the example the interrupted run would have read
next, in a time that does not grow with the step: each worker reads its
input pipeline (`train_dataset_fn(ctx)`) through a tf.data iterator of its
own, and every checkpoint saves that iterator's state (`input/` in ckpt-N;
on a non-chief MultiWorkerMirroredStrategy worker, in its own scratch
checkpoint of the same step). tf.data saves the file offsets and the records
it holds (the shuffle buffer, prefetched batches) and a restore seeks the
files, so nothing consumed is read again; a checkpoint grows by about
`shuffle_buffer_size` serialised records and a few batches per worker.
A step takes one element per local replica from the iterator and hands
element j to local replica j (`experimental_distribute_values_from_function`),
as `distribute_datasets_from_function` would.

The consumed elements are skipped (read again) instead, with one WARNING
line giving their count and an estimate of the time, when the checkpoint has
no input state (written by an earlier version, or a non-chief worker whose
scratch checkpoint is gone), when the dataset's iterator cannot be saved
(e.g. `Dataset.from_generator`; probed at the start), and under
TPUStrategy, whose input stays on `distribute_datasets_from_function` (not
tried on a TPU here). With the tf.data service nothing is saved or skipped
(`data_service.RESUME_NOTE`).
"""

from __future__ import annotations

import os
import re
import time
from typing import Optional, Tuple

import tensorflow as tf
from absl import logging

from albert_tf.training.common import DatasetFn
from albert_tf.training.step import (
    check_element_spec,
    distributed_train_iterator,
    elements_per_step,
)
from pipelines import corrupt_records

# The name of the iterator's state in a checkpoint (its variable is
# "input/.ATTRIBUTES/ITERATOR_STATE").
CHECKPOINT_KEY = "input"
_SAMPLE = 4  # elements timed for a skip's estimate (after the first)


def input_context(strategy: tf.distribute.Strategy) -> tf.distribute.InputContext:
    """The `InputContext` that `strategy.distribute_datasets_from_function`
    gives this worker's input pipeline (asked of the strategy itself).

    Example:

    >>> input_context(tf.distribute.get_strategy()).num_input_pipelines
    1
    """
    seen = []
    strategy.distribute_datasets_from_function(
        lambda ctx: seen.append(ctx) or tf.data.Dataset.range(1))
    return seen[0]


def has_input_state(prefix: Optional[str]) -> bool:
    """Whether the checkpoint `prefix` exists and holds an input position."""
    if not prefix or not tf.io.gfile.exists(prefix + ".index"):
        return False
    from albert_tf.checkpoints import checkpoint_variable_names

    return any(name.startswith(CHECKPOINT_KEY + "/")
               for name in checkpoint_variable_names(prefix))


def own_checkpoint(resumed_from: Optional[str], ckpt_dir: str) -> Optional[str]:
    """This worker's checkpoint of the step `resumed_from` holds: that one on
    the chief; the one of the same number in `ckpt_dir` (its scratch folder)
    on another worker."""
    if not resumed_from:
        return None
    return os.path.join(ckpt_dir, os.path.basename(resumed_from))


def _host(strategy: tf.distribute.Strategy) -> str:
    """This worker's CPU, where its input pipeline runs."""
    try:
        first = strategy.extended.worker_devices[0]
    except RuntimeError:  # the default strategy has no devices of its own
        return "/device:CPU:0"
    device = tf.DeviceSpec.from_string(first)
    return device.replace(device_type="CPU", device_index=0).to_string()


def _reason(error: Exception) -> str:
    """The first line of a TensorFlow error, without its function-node prefix."""
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(getattr(error, "message", error)))
    return text.strip().splitlines()[0][:300] if text.strip() else type(error).__name__


def _saveable(dataset: tf.data.Dataset) -> Optional[str]:
    """None when the state of an iterator over `dataset` can be saved, else
    why not (one line). Asked of an iterator of its own after its first
    element: the datasets that interleave opens exist only from then on."""
    probe = iter(dataset)
    try:
        next(probe)
    except (StopIteration, tf.errors.OpError):
        return None  # the training loop says what is wrong with the data
    try:
        probe._serialize_to_tensors()  # pylint: disable=protected-access
    except (tf.errors.OpError, ValueError, TypeError) as e:
        return _reason(e)
    return None


def _log_skip(dataset: tf.data.Dataset, elements: int, rows: int, why: str) -> None:
    """One WARNING line: how many records a resume re-reads, and how long
    that takes at the rate of a few elements read now."""
    probe = iter(dataset)
    next(probe)  # the pipeline's start (buffers filling) is not the rate
    sample = max(1, min(_SAMPLE, elements - 1))
    start = time.perf_counter()
    for _ in range(sample):
        next(probe)
    seconds = (time.perf_counter() - start) / sample * elements
    logging.warning(
        "Resuming the input by reading again the %d records (%d batches of %d) that the completed "
        "steps consumed, %s: about %.0f s at this input's current rate (%d records/s); a SIGTERM "
        "is acted on only after that.", elements * rows, elements, rows, why, seconds,
        elements * rows / max(seconds, 1e-9))


@tf.function
def _advance(iterator, count):
    """Reads and drops `count` elements of `iterator`."""
    for _ in tf.range(count):
        next(iterator)


class TrainInput:
    """This worker's training input: `iterator` goes to `train_step`, which
    takes a step's per-replica batch with `next_batch(iterator)`; `saveable`
    is the tf.data iterator that checkpoints carry (None: nothing saved).

    Args:
        strategy: the run's strategy.
        dataset_fn: `InputContext -> Dataset` of per-replica batches
            (already checked, as `distributed_train_iterator` checks it).
        position: elements of this pipeline per step times steps done (with
            rollbacks' skips): where the input must continue.
        own_checkpoint: this worker's checkpoint to restore the position
            from (`own_checkpoint`), or None on a fresh start.
        per_replica_batch: rows per element (for the skip's log line).
    """

    def __init__(self, strategy: tf.distribute.Strategy, dataset_fn: DatasetFn,
                 position: int, own_checkpoint: Optional[str], per_replica_batch: int):
        self.strategy = strategy
        ctx = input_context(strategy)
        self.per_step = elements_per_step(ctx)
        self._first_replica = ctx.input_pipeline_id * self.per_step
        consumed = position * self.per_step

        def make() -> tf.data.Dataset:
            # A new dataset each time: iterating one dataset again reshuffles
            # (shuffle with reshuffle_each_iteration draws new seeds).
            with tf.device(_host(strategy)):
                return dataset_fn(ctx)

        with tf.device(_host(strategy)):
            with corrupt_records.quiet():  # a probe: the training iterator logs each skipped record once
                why_not = _saveable(make())
            self.iterator = iter(make())
        self.saveable = None if why_not else self.iterator
        if why_not:
            logging.warning("The input's position cannot be saved in checkpoints (%s): a resume "
                            "reads the consumed batches again.", why_not)
        if not consumed:
            return
        why = (why_not and "its position cannot be saved") or (
            f"{own_checkpoint or 'the checkpoint'} holds no input position")
        if self.saveable is not None and has_input_state(own_checkpoint):
            try:
                tf.train.Checkpoint(**{CHECKPOINT_KEY: self.iterator}).restore(
                    own_checkpoint).expect_partial()
                logging.info("Input position restored from %s (batch %d of this worker's input).",
                             own_checkpoint, consumed)
                return
            except (tf.errors.OpError, ValueError) as e:  # another pipeline than the one saved
                why = f"the input position in {own_checkpoint} does not fit this input pipeline ({_reason(e)})"
                with tf.device(_host(strategy)):
                    self.iterator = self.saveable = iter(make())
        with corrupt_records.quiet():
            _log_skip(make(), consumed, per_replica_batch, why)
        # Pulled, not Dataset.skip: the iterator stays one of the plain
        # dataset, whose state the next checkpoints save and restore.
        _advance(self.iterator, tf.constant(consumed, tf.int64))

    def next_batch(self, iterator):
        """The step's per-replica batch (call inside `train_step`)."""
        elements = [next(iterator) for _ in range(self.per_step)]
        return self.strategy.experimental_distribute_values_from_function(
            lambda ctx: elements[ctx.replica_id_in_sync_group - self._first_replica])


class _DistributedInput:
    """The input of `distribute_datasets_from_function` (tf.data service,
    TPUStrategy): nothing saved in checkpoints."""

    saveable = None

    def __init__(self, iterator):
        self.iterator = iterator

    @staticmethod
    def next_batch(iterator):
        return next(iterator)


def _skip_logged(train_dataset_fn: DatasetFn, position: int, per_replica_batch: int,
                 why: str) -> DatasetFn:
    """`train_dataset_fn` whose datasets log the skip of a resume at `position` steps."""

    def dataset_fn(ctx):
        consumed = position * elements_per_step(ctx)
        if consumed:  # on a dataset of its own (iterating one again reshuffles)
            _log_skip(train_dataset_fn(ctx), consumed, per_replica_batch, why)
        return train_dataset_fn(ctx)

    return dataset_fn


def train_input(strategy: tf.distribute.Strategy, train_dataset_fn: DatasetFn, position: int,
                lengths: Tuple[Optional[int], Optional[int]], per_replica_batch: int,
                own_checkpoint: Optional[str] = None, service: Optional[Tuple[str, str]] = None):
    """The run's `TrainInput` (or its `distribute_datasets_from_function`
    counterpart with a tf.data service or under TPUStrategy).

    Args:
        strategy: the run's strategy.
        train_dataset_fn: the user's `InputContext -> Dataset`.
        position: steps' batches consumed so far (step + rollbacks' skips).
        lengths: (max_seq_length, max_predictions_per_seq) the elements
            must have (None: not checked), as `check_element_spec` checks.
        per_replica_batch: rows per element.
        own_checkpoint: this worker's checkpoint of the resumed step, or None.
        service: (address, job) of a tf.data service, or None.
    """
    if service or isinstance(strategy, tf.distribute.TPUStrategy):
        fn = train_dataset_fn
        if not service:
            fn = _skip_logged(train_dataset_fn, position, per_replica_batch,
                              "since TPUStrategy input is not saved in checkpoints")
        address, job = service or (None, None)
        return _DistributedInput(distributed_train_iterator(
            strategy, fn, position, *lengths, per_replica_batch, address, job))

    def checked(ctx):
        dataset = train_dataset_fn(ctx)
        check_element_spec(dataset.element_spec, *lengths, per_replica_batch)
        return dataset

    return TrainInput(strategy, checked, position, own_checkpoint, per_replica_batch)
