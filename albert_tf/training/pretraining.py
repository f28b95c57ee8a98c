"""`run_pretraining`: the loop that ties the training pieces together.

Reading order: `_check_arguments` -> `_prepare_state` (`TrainState.create`,
`restore_or_warm_start`, `check_run_settings`) -> `train_input.train_input`
-> `build_train_step` -> `_train_loop` (with `MetricsLogger` and `StopPolicy`)
-> `_write_outputs` -> `final_evaluation`.

Resuming, preemption and a diverging loss:
Restarting with the same arguments resumes from the latest checkpoint in
output_dir (weights, optimizer slots, step, loss scale, dropout RNG state,
data position) and logs "Resumed from step N". The data position is the
input iterator's state, saved in every checkpoint and restored without
reading the consumed records again (`albert_tf.training.train_input`):
exact for a deterministic dataset_fn, in a time that does not grow with
the step. Where it cannot be saved (a checkpoint without it, an iterator
tf.data cannot save, TPUStrategy) the consumed batches are read again,
logged in one line with their count and an estimate (with
`data.data_service_address` nothing is skipped and the data position is
not restored: `data_service.RESUME_NOTE`, logged at the start). The
settings that fix what a step means (global batch, replicas,
accumulation, sequence and prediction lengths) are recorded in
training_settings.json; resuming with others is a TrainingError. A larger
num_train_steps is allowed (the schedule change is logged).
SIGTERM / SIGINT during training end the run after the current step with
a checkpoint of that step and `Preempted` (see `handle_preemption`).
A non-finite loss ends the run with a TrainingError naming the last good
checkpoint, or, with `recovery.on_nonfinite="rollback"`, rolls it back
(`albert_tf.training.healing`). No checkpoint with non-finite weights or
optimizer slots is written.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Dict, Optional

import keras
import tensorflow as tf
from absl import logging

from albert_tf import runtime as runtime_lib
from albert_tf.config import AlbertConfig
from albert_tf.preemption import Preempted, PreemptionWatcher
from albert_tf.training import data_service
from albert_tf.training import train_input as train_input_lib
from albert_tf.training.agreement import check_workers_agree
from albert_tf.training.common import DatasetFn, TrainingError
from albert_tf.training.configs import (
    OptimizationConfig,
    PretrainingDataConfig,
    RecoveryConfig,
    RuntimeConfig,
)
from albert_tf.training.evaluation import final_evaluation
from albert_tf.training.healing import Divergence, Healer, all_finite
from albert_tf.training.reporting import MetricsLogger, StopPolicy
from albert_tf.training.state import (
    TrainState,
    check_or_write_config,
    check_run_settings,
    restore_or_warm_start,
    run_settings,
)
from albert_tf.training.step import build_train_step


def _check_arguments(config: AlbertConfig, optimization: OptimizationConfig,
                     runtime: RuntimeConfig, data: PretrainingDataConfig,
                     num_replicas: int) -> str:
    """ValueError on inconsistent settings; returns the resolved precision."""
    optimization.validate(num_replicas)
    precision = runtime.resolved_precision()
    if data.data_service_address:
        data_service.check_address(data.data_service_address)
    if data.max_seq_length and data.max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={data.max_seq_length} exceeds the model's "
            f"max_position_embeddings={config.max_position_embeddings}.")
    return precision


class _Saver:
    """Writes the checkpoints of the loop, never one with non-finite weights.

    Args:
        state: the train state.
        chief: whether this worker's checkpoints are the run's.
        healer: the rollback machinery (None with on_nonfinite=stop).
        resumed_from: the checkpoint the run started from, or None.
    """

    def __init__(self, state: TrainState, chief: bool, healer: Optional[Healer],
                 resumed_from: Optional[str]):
        self.state, self.chief, self.healer = state, chief, healer
        self._finite = all_finite(list(state.model.weights) + list(state.optimizer.variables))
        self.last = resumed_from  # the last good checkpoint

    def save(self, step: int) -> str:
        """Checks the weights and optimizer slots, then saves `step`.

        Raises:
            Divergence: (rollback) the weights are not finite.
            TrainingError: (stop) idem, naming the last good checkpoint.
        """
        if not self._finite():
            if self.healer is not None:
                raise Divergence(step, float("nan"), "non-finite weights")
            raise TrainingError(
                f"The weights are not finite after step {step}: no checkpoint written. Last good "
                f"checkpoint: {self.last or 'none'}. Lower --learning_rate, or --on_nonfinite=rollback.")
        if self.healer is not None:
            self.healer.guard.store()
        path = self.state.manager.save(checkpoint_number=step)
        if self.chief:
            self.last = path
            logging.info("Saved checkpoint %s", path)
        # A non-chief worker's manager keeps only its newest copy (max_to_keep=1): a resume reads this
        # worker's input position from it (train_input.own_checkpoint), the weights from the chief's.
        return path


def _next_batch(train_step, iterator, step: int, start_step: int,
                stop: StopPolicy, data: PretrainingDataConfig, train_batch_size: int):
    """One step; the input's faults as TrainingErrors saying what to check."""
    try:
        return train_step(iterator)
    except (tf.errors.OutOfRangeError, StopIteration) as e:
        if step == start_step:
            raise TrainingError(
                "The training data yielded no batch: are the input files "
                "empty, or smaller than one global batch of "
                f"{train_batch_size}?") from e
        raise TrainingError(
            f"The training data ran out at step {step} of "
            f"{stop.num_train_steps}; the dataset must repeat.") from e
    except tf.errors.InvalidArgumentError as e:
        if step == start_step:
            raise TrainingError(
                "The first batch could not be read or used; are the "
                "features of the length given by --max_seq_length="
                f"{data.max_seq_length} / --max_predictions_per_seq="
                f"{data.max_predictions_per_seq}? {e.message}") from e
        raise


def _train_loop(train_step, iterator, state: TrainState, start_step: int,
                stop: StopPolicy, logger: MetricsLogger, saver: _Saver,
                data: PretrainingDataConfig, train_batch_size: int,
                watcher: Optional[PreemptionWatcher] = None) -> None:
    """Steps until the stop policy says so; logs and saves on its cadence.

    With `saver.healer` every step's loss is checked, and a `Divergence`
    (a bad loss, or non-finite weights at a save) rolls the run back to its
    last checkpoint; the input iterator goes on, so the batches read since
    are skipped.

    Raises:
        Preempted: `watcher` saw SIGTERM / SIGINT (on any worker); the step
            in progress was finished and checkpointed first.
    """
    step = start_step
    healer = saver.healer
    if healer is not None and saver.last is None:
        saver.save(step)  # something to roll back to
    while step < stop.num_train_steps:
        terms = _next_batch(train_step, iterator, step, start_step, stop, data,
                            train_batch_size)
        step += 1
        logger.add(step, terms)
        try:
            if healer is not None:
                logger.flush(saver.last)  # checks this step's loss
            log_now, save_now, stop_now = stop.decide(step)
            if log_now or save_now:
                logger.flush(saver.last)
            if log_now:
                logger.log(step)
            if save_now:
                saver.save(step)
            if stop_now:
                break
            # Every worker asks once a step (a collective under multi-worker).
            if watcher is not None and watcher.should_stop():
                _checkpoint_and_stop(saver, logger, step, save_now, watcher.reason)
        except Divergence as event:
            step = healer.rollback(event)
            logger.restart(step)


def _checkpoint_and_stop(saver: _Saver, logger: MetricsLogger, step: int,
                         saved: bool, reason: str) -> None:
    """Writes the checkpoint of `step` (unless just saved) and raises Preempted."""
    if not saved:
        logger.flush(saver.last)  # never checkpoint a non-finite loss
        saver.save(step)
    path = saver.state.manager.latest_checkpoint
    if not saver.chief:  # the same step's checkpoint in output_dir, the chief's
        scratch = os.path.dirname(path)
        path = os.path.join(os.path.dirname(scratch), os.path.basename(path))
    logging.warning("Preempted (%s) after step %d: saved checkpoint %s",
                    reason, step, path)
    raise Preempted(reason, step, path)


def _prepare_state(config: AlbertConfig, optimization: OptimizationConfig,
                   runtime: RuntimeConfig, data: PretrainingDataConfig,
                   precision: str, strategy: tf.distribute.Strategy,
                   output_dir: str, init_checkpoint: Optional[str],
                   chief: bool, allow_partial_init: bool = False):
    """Model, optimizer and step, resumed or warm-started, with the run's
    settings checked against the recorded ones.

    Returns:
        (state, the checkpoint resumed from or None, checkpoint folder).
    """
    replicas = strategy.num_replicas_in_sync
    task_type, task_id = runtime_lib.worker_task(strategy)

    tf.io.gfile.makedirs(output_dir)
    check_or_write_config(config, output_dir, chief)
    # Non-chief workers must take part in saving (collectives) but write to a
    # private folder that is removed at the end.
    ckpt_dir = output_dir if chief else os.path.join(
        output_dir, f".worker-{task_type}-{task_id}")

    keras.utils.set_random_seed(runtime.seed)
    state = TrainState.create(config, optimization, precision, strategy,
                              ckpt_dir, runtime.keep_checkpoint_max if chief else 1)
    latest = restore_or_warm_start(state, output_dir, init_checkpoint, config, allow_partial_init)
    check_workers_agree(strategy, state.step, int(state.recovery.data_offset.numpy()), latest, output_dir)
    check_run_settings(
        output_dir, run_settings(optimization, replicas, data.max_seq_length,
                                 data.max_predictions_per_seq, runtime.seed,
                                 data.masking, data.masked_lm_prob,
                                 data.input_file),
        latest, chief)
    return state, latest, ckpt_dir


def _write_outputs(state: TrainState, logger: MetricsLogger, output_dir: str,
                   ckpt_dir: str, chief: bool, spm_model_file: Optional[str],
                   eval_dataset_fn: Optional[DatasetFn],
                   strategy: tf.distribute.Strategy,
                   data: PretrainingDataConfig) -> Dict[str, Any]:
    """The trained model's folder (chief), the final evaluation, the result."""
    result: Dict[str, Any] = {"global_step": state.step}
    result.update({k: v for k, v in logger.last.items() if k != "step"})
    result["checkpoint"] = tf.train.latest_checkpoint(output_dir)
    result["model"] = state.model
    if chief:
        from albert_tf import checkpoints  # lazy: optional heavy imports

        checkpoints.save_pretrained(state.model, output_dir,
                                    spm_model_file=spm_model_file, step=state.step)
    elif tf.io.gfile.exists(ckpt_dir):  # gfile: shutil.rmtree silently does nothing on gs://
        try:
            tf.io.gfile.rmtree(ckpt_dir)
        except tf.errors.OpError as e:  # scratch space only: the run's result is complete
            logging.warning("Could not remove the worker's scratch folder %s: %s", ckpt_dir, e)

    if eval_dataset_fn is not None:
        results = final_evaluation(state.model, eval_dataset_fn, strategy,
                                   data.max_eval_steps, result["global_step"],
                                   output_dir, chief)
        result.update({f"eval_{k}": v for k, v in results.items()})
    return result


def _train_input(strategy, train_dataset_fn, data_position: int, data: PretrainingDataConfig,
                 per_replica_batch: int, output_dir: str, resumed_from: Optional[str], ckpt_dir: str):
    """This worker's training input after `data_position` steps' batches
    (`train_input.train_input`: restored from this worker's checkpoint of the
    resumed step), or from the tf.data service when
    `data.data_service_address` is set (its resume caveat logged)."""
    service = None
    if data.data_service_address:
        service = (data.data_service_address, data_service.job_name(output_dir))
        logging.warning(
            "Training input from the tf.data service at %s (job %s): %s%s.",
            data.data_service_address, service[1], data_service.RESUME_NOTE,
            f"; resuming at input batch {data_position}" if data_position else "")
    return train_input_lib.train_input(
        strategy, train_dataset_fn, data_position,
        (data.max_seq_length, data.train_predictions_per_seq()), per_replica_batch,
        train_input_lib.own_checkpoint(resumed_from, ckpt_dir), service)


def _logger_and_stop_policy(state, strategy, optimization, runtime, output_dir, chief, start_step,
                            log_callback, healer):
    """The run's `MetricsLogger` (TensorBoard summaries on the chief only) and its `StopPolicy`."""
    writer = (tf.summary.create_file_writer(os.path.join(output_dir, "train"))
              if chief else tf.summary.create_noop_writer())
    logger = MetricsLogger(state.schedule, optimization.num_train_steps,
                           optimization.train_batch_size, writer, start_step,
                           runtime.max_train_seconds, log_callback,
                           check=healer.guard.check if healer else None)
    stop = StopPolicy(strategy, optimization.num_train_steps,
                      runtime.log_steps, runtime.save_checkpoints_steps,
                      runtime.max_train_seconds)
    return logger, stop


def run_pretraining(
    config: AlbertConfig,
    train_dataset_fn: DatasetFn,
    output_dir: str,
    *,
    optimization: OptimizationConfig,
    runtime: Optional[RuntimeConfig] = None,
    data: Optional[PretrainingDataConfig] = None,
    init_checkpoint: Optional[str] = None,
    spm_model_file: Optional[str] = None,
    eval_dataset_fn: Optional[DatasetFn] = None,
    strategy: Optional[tf.distribute.Strategy] = None,
    log_callback: Optional[Callable[[Dict[str, Any]], None]] = None,
    handle_preemption: bool = True,
    recovery: Optional[RecoveryConfig] = None,
    allow_partial_init_checkpoint: bool = False,
) -> Dict[str, Any]:
    """Pretrains an `AlbertPretrainer` (MLM + SOP) and writes it to output_dir.

    Resuming, preemption and a diverging loss: see this module's docstring.

    Args:
        config: the model config; output_dir must not hold another one.
        train_dataset_fn: ``InputContext -> tf.data.Dataset`` yielding dict
            batches with the TFRecord feature names, of
            ``input_context.get_per_replica_batch_size(train_batch_size)``
            examples, repeating (e.g. `pipelines.pretraining_dataset`);
            deterministic (seeded shuffles) for an exact resume, and savable by
            tf.data (no `from_generator`, `py_function` or unseeded random op)
            for a resume that does not read the consumed records (`train_input`).
        output_dir: checkpoints (ckpt-<step>), TensorBoard summaries, the config,
            training_settings.json, model.weights.safetensors, spm.model and
            eval_results.txt.
        optimization: batch, steps, optimizer and schedule.
        runtime: precision, XLA, checkpoint/log cadence, seed, time budget
            (default `RuntimeConfig()`).
        data: lengths checked against the data, evaluation steps (default
            `PretrainingDataConfig()`: no length check).
        init_checkpoint: warm start from anything `albert_tf.load_checkpoint`
            reads (ignored when resuming); a model of another shape is refused
            in one line naming the first variable that differs.
        spm_model_file: SentencePiece model copied into output_dir.
        eval_dataset_fn: if given, evaluate after training and write
            eval_results.txt.
        strategy: a `tf.distribute.Strategy` (default: the current one).
        log_callback: called with each logged dict (step, loss, ...).
        handle_preemption: SIGTERM / SIGINT finish the step, write its checkpoint
            and raise `albert_tf.preemption.Preempted` (every worker agrees on
            the step; resuming is exact). False: the signals keep their handlers.
        recovery: what a diverging loss does (default `RecoveryConfig()`: stop).
        allow_partial_init_checkpoint: warm-start from a model of another
            shape, loading only the variables that match (logged at WARNING).

    Returns:
        dict with global_step, the last interval's train metrics (loss,
        mlm_accuracy, sop_accuracy, learning_rate, examples_per_second, ...),
        checkpoint (latest path), model (the trained `AlbertPretrainer`), and
        eval_* results when evaluated.

    Example (tiny model, constant data):

    >>> import tempfile, albert_tf, tensorflow as tf
    >>> from albert_tf import training
    >>> def dataset_fn(ctx):
    ...     ex = {"input_ids": tf.ones([16], tf.int32),
    ...           "input_mask": tf.ones([16], tf.int32),
    ...           "segment_ids": tf.zeros([16], tf.int32),
    ...           "masked_lm_positions": tf.constant([1, 2], tf.int32),
    ...           "masked_lm_ids": tf.constant([5, 6], tf.int32),
    ...           "masked_lm_weights": tf.ones([2]),
    ...           "next_sentence_labels": tf.constant(0, tf.int32)}
    ...     b = ctx.get_per_replica_batch_size(8)
    ...     return tf.data.Dataset.from_tensors(ex).repeat().batch(b)
    >>> result = training.run_pretraining(
    ...     albert_tf.AlbertConfig.tiny(), dataset_fn, tempfile.mkdtemp(),
    ...     optimization=training.OptimizationConfig(
    ...         train_batch_size=8, num_train_steps=2, num_warmup_steps=1),
    ...     runtime=training.RuntimeConfig(log_steps=1))
    >>> result["global_step"]
    2
    """
    runtime = runtime or RuntimeConfig()
    data = data or PretrainingDataConfig()
    recovery = recovery or RecoveryConfig()
    recovery.validate()
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    precision = _check_arguments(config, optimization, runtime, data, replicas)
    accum = optimization.gradient_accumulation_steps
    chief = runtime_lib.is_chief(strategy)
    state, latest, ckpt_dir = _prepare_state(
        config, optimization, runtime, data, precision, strategy, output_dir,
        init_checkpoint, chief, allow_partial_init_checkpoint)
    start_step = state.step
    healer = Healer(recovery, state, output_dir) if recovery.rollback else None

    # Batches skipped by rollbacks stay skipped: step t reads batch t + offset.
    data_position = start_step + int(state.recovery.data_offset.numpy())
    inputs = _train_input(strategy, train_dataset_fn, data_position, data,
                          optimization.train_batch_size // replicas, output_dir, latest, ckpt_dir)
    if inputs.saveable is not None:
        state.attach_input(inputs.saveable)
    train_step = build_train_step(state, strategy, accum, runtime.jit_compile,
                                  jit_whole_step=runtime.jit_whole_step, next_batch=inputs.next_batch)
    logger, stop = _logger_and_stop_policy(state, strategy, optimization, runtime, output_dir, chief,
                                           start_step, log_callback, healer)
    logging.info(
        "Training steps %d..%d: global batch %d = %d per replica micro-batch "
        "x %d replicas x %d accumulation steps; %s, %s", start_step,
        optimization.num_train_steps, optimization.train_batch_size,
        optimization.micro_batch_size(replicas), replicas, accum,
        optimization.optimizer, precision)
    watcher = PreemptionWatcher(strategy) if handle_preemption else None
    with watcher or contextlib.nullcontext():
        _train_loop(train_step, inputs.iterator, state, start_step, stop, logger,
                    _Saver(state, chief, healer, latest), data,
                    optimization.train_batch_size, watcher)

    return _write_outputs(state, logger, output_dir, ckpt_dir, chief,
                          spm_model_file, eval_dataset_fn, strategy, data)
