"""Keras callbacks of fine-tuning: progress line, TensorBoard scalars, resume state, best-on-dev model.

`keras.callbacks.TensorBoard` needs the tensorboard package, which TensorFlow
2.21 does not install; `ScalarSummaries` writes the same event records with
TensorFlow's core summary ops. `keras.callbacks.BackupAndRestore` stores
weights in HDF5 through `model.save_weights`; `ResumeCheckpoint` uses a
`tf.train.Checkpoint` of the model, the optimizer, the dropout seed states and
the data position instead (works under every `tf.distribute` strategy, restores
the learning-rate schedule's step, and resumes mid-epoch).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Callable, Dict, Optional

import keras
import tensorflow as tf
from absl import logging

from pipelines.fileio import atomic_write, read_json

RESUME_DIR = "resume"
BEST_STATE_FILE = "best_dev.json"


def format_duration(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss`` under an hour).

    Example:
    >>> format_duration(75), format_duration(3725.2)
    ('1:15', '1:02:05')
    """
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def write_scalar(name: str, value: float) -> None:
    """One TensorBoard scalar through the default summary writer and step (core ops only)."""
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(name, tf.constant(float(value), tf.float32), metadata=metadata.SerializeToString())


def _optimizer_step(model: keras.Model) -> int:
    return int(model.optimizer.iterations.numpy())


class ProgressLogger(keras.callbacks.Callback):
    """Logs ``step s/T (p%) loss ... | x steps/s, y examples/s | ETA`` every `log_steps` steps.

    Args:
        total_steps: optimizer steps of the whole run (for the ETA).
        batch_size: global batch size (for examples/s).
        log_steps: logging interval in steps.
    """

    def __init__(self, total_steps: int, batch_size: int, log_steps: int = 50):
        super().__init__()
        self.total_steps = int(total_steps)
        self.batch_size = int(batch_size)
        self.log_steps = max(1, int(log_steps))
        self._t0 = None
        self._step0 = 0

    def on_train_begin(self, logs=None):
        self._t0 = time.time()
        self._step0 = _optimizer_step(self.model)

    def on_train_batch_end(self, batch, logs=None):
        step = _optimizer_step(self.model)
        if step % self.log_steps and step != self.total_steps:
            return
        elapsed = time.time() - self._t0
        done = step - self._step0
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (self.total_steps - step) / rate if rate > 0 else float("nan")
        values = " ".join(f"{k} {float(v):.4f}" for k, v in sorted((logs or {}).items()))
        logging.info(
            "step %d/%d (%.0f%%) %s | %.2f steps/s, %.1f examples/s | elapsed %s, ETA %s",
            step, self.total_steps, 100.0 * step / max(1, self.total_steps), values, rate,
            rate * self.batch_size, format_duration(elapsed),
            format_duration(eta) if math.isfinite(eta) else "?",
        )


class StopOnNonFinite(keras.callbacks.Callback):
    """``--on_nonfinite=stop`` of fine-tuning: a non-finite loss ends the run at its step, before anything is saved.

    Put it first in the callback list: the resume checkpoint, the best-on-dev
    model and the run settings of that step are then never written, so the
    last resume checkpoint is the last good state (as `albert-pretrain` does).

    Args:
        resume: the run's `ResumeCheckpoint` (named in the message).

    Raises:
        TrainingError: one line naming the step, the loss and the last good
            resume checkpoint (albert-finetune exits 1, as albert-pretrain).
    """

    def __init__(self, resume: "ResumeCheckpoint"):
        super().__init__()
        self._resume = resume

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", 0.0))
        if math.isfinite(loss):
            return
        from albert_tf.training.common import TrainingError

        self.model.stop_training = True
        raise TrainingError(
            f"Loss is {loss} at step {_optimizer_step(self.model)}. Last good checkpoint: "
            f"{self._resume.latest_checkpoint or 'none (no checkpoint yet)'} (the same command resumes from it). "
            "Lower --learning_rate, check the data, or use float32.")


class RecordRunSettings(keras.callbacks.Callback):
    """Calls `record` once, when the run's first training step is done.

    Put it first in the callback list: the run settings are then written
    before any resume checkpoint or model is, and a run that fails before
    its first step (a model that does not build, a first step that fails)
    leaves no settings that would bind its --output_dir.

    Args:
        record: what to call, e.g. ``lambda: record_run_state(options, settings)``.
    """

    def __init__(self, record: Callable[[], object]):
        super().__init__()
        self._record = record
        self.recorded = False

    def on_train_batch_end(self, batch, logs=None):
        if not self.recorded:
            self._record()
            self.recorded = True


class ScalarSummaries(keras.callbacks.Callback):
    """TensorBoard scalars: training logs every `log_steps` steps, epoch logs at the end of each epoch.

    Events go to ``<log_dir>/train``; `write_eval` (used by `BestOnDev`)
    writes to ``<log_dir>/eval``. The step is the optimizer's iteration count.
    """

    def __init__(self, log_dir: str, log_steps: int = 50):
        super().__init__()
        self.log_steps = max(1, int(log_steps))
        self._train = tf.summary.create_file_writer(os.path.join(log_dir, "train"))
        self._eval = tf.summary.create_file_writer(os.path.join(log_dir, "eval"))

    def _write(self, writer, logs: Dict[str, float], prefix: str = "") -> None:
        with writer.as_default(step=_optimizer_step(self.model)):
            for key, value in logs.items():
                if isinstance(value, (int, float)) or hasattr(value, "numpy"):
                    write_scalar(prefix + key, float(value))
        writer.flush()

    def on_train_batch_end(self, batch, logs=None):
        if _optimizer_step(self.model) % self.log_steps == 0 and logs:
            logs = dict(logs)
            lr = self.model.optimizer.learning_rate
            logs["learning_rate"] = float(lr.numpy() if hasattr(lr, "numpy") else lr)
            self._write(self._train, logs)

    def write_eval(self, results: Dict[str, float]) -> None:
        """Writes dev results at the current step."""
        self._write(self._eval, {k: v for k, v in results.items() if isinstance(v, (int, float))})

    def on_train_end(self, logs=None):
        self._train.flush()
        self._eval.flush()


def build_optimizer(model: keras.Model) -> None:
    """Builds the compiled model's optimizer on all of ``model.trainable_variables`` (once).

    Called before the first `fit` and before a resume restores the optimizer, so
    that both hold the same slots in the same order. Left unbuilt, the optimizer
    is built by the first `apply_gradients` on the variables it gets, and the task
    models' train step (albert_tf/models/task_model.py) passes only those with a
    gradient: the pooler of span QA and tagging gets none, so it would have no
    slots, and a resume (which builds on every trainable variable) would restore
    each slot after it into the wrong variable (issue 29). Built here, training
    applies the gradients it has and leaves the slots of a variable without one as
    they are.

    Args:
        model: a compiled, built model.

    Raises:
        ValueError: the model is not built (its variables do not exist yet).
    """
    if model.optimizer.built:
        return
    if not model.built:
        raise ValueError(f"build_optimizer: model {model.name!r} is not built; call it on a batch first.")
    model.optimizer.build(model.trainable_variables)


def seed_states(model: keras.Model) -> list:
    """The state variables of the model's random seed generators (dropout).

    `model.variables` holds them but `model.weights` does not, and a
    `tf.train.Checkpoint` of the model leaves them out; without them a resumed
    run would draw other dropout masks than an uninterrupted one.
    """
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


class ResumeCheckpoint(keras.callbacks.Callback):
    """Saves the run state every `save_steps` batches and at each epoch end; `restore()` picks it up.

    The state is model + optimizer + dropout seed states + the data position:
    batches trained, and the pass over the training data and the batch within
    it that come next (the data order is a function of the seed and the pass,
    `pipelines.finetune.common.passes_dataset`, so a resumed run sees exactly
    the batches an uninterrupted run would). A rerun of the same command calls
    `restore()` before training and starts its dataset at the returned batch.

    Args:
        output_dir: the run's folder; the state lives in ``output_dir/resume``.
        model: the compiled model (its optimizer must exist).
        batches_per_pass: batches in one pass over the training data.
        save_steps: save every this many batches (None or 0: only at epoch
            ends). A batch that ends an epoch is saved by `on_epoch_end`, after
            the dev evaluation (`BestOnDev` runs before this callback).
        max_to_keep: checkpoints kept (2: a resume falls back to the previous one when the latest
            cannot be read).
    """

    def __init__(self, output_dir: str, model: keras.Model, batches_per_pass: int = 1,
                 save_steps: Optional[int] = None, max_to_keep: int = 2):
        super().__init__()
        if batches_per_pass < 1:
            raise ValueError(f"batches_per_pass must be positive, got {batches_per_pass!r}.")
        self.directory = os.path.join(output_dir, RESUME_DIR)
        self.batches_per_pass = int(batches_per_pass)
        self.save_steps = int(save_steps or 0)
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="finished_epochs")
        self.batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches_done")
        self.data_pass = tf.Variable(0, dtype=tf.int64, trainable=False, name="data_pass")
        self.pass_batch = tf.Variable(0, dtype=tf.int64, trainable=False, name="pass_batch")
        self._done = 0
        self._saved_at: Optional[int] = None  # the batch count of this run's last save
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=self.epoch,
                                               batches=self.batches, data_pass=self.data_pass,
                                               pass_batch=self.pass_batch, seed_states=seed_states(model))
        self._manager = tf.train.CheckpointManager(self._checkpoint, self.directory, max_to_keep=max_to_keep)

    def restore(self) -> int:
        """Restores the latest state (if any) and returns the number of batches trained."""
        from albert_tf.checkpoint_fallback import restore_newest_readable

        if not self._manager.latest_checkpoint:
            return 0
        # The optimizer's slots exist only after it is built.
        self.model_optimizer_build()
        # A corrupt latest state: the previous one (max_to_keep=2 keeps it), with a WARNING naming it.
        latest = restore_newest_readable(
            lambda path: self._checkpoint.restore(path).assert_existing_objects_matched(), self.directory)
        self._done = int(self.batches.numpy())
        position = (int(self.data_pass.numpy()), int(self.pass_batch.numpy()))
        if position != divmod(self._done, self.batches_per_pass):
            raise ValueError(
                f"{latest}: data position pass {position[0]} batch {position[1]} does not match "
                f"{self._done} batches of {self.batches_per_pass} a pass: the training data changed.")
        logging.info("Resuming from %s: %d batch(es) done (%d epoch(s)), next data pass %d batch %d, "
                     "optimizer step %d.", latest, self._done, int(self.epoch.numpy()), position[0],
                     position[1], int(self._checkpoint.optimizer.iterations.numpy()))
        return self._done

    def model_optimizer_build(self) -> None:
        build_optimizer(self._checkpoint.model)

    def _save(self) -> None:
        self.batches.assign(self._done)
        data_pass, pass_batch = divmod(self._done, self.batches_per_pass)
        self.data_pass.assign(data_pass)
        self.pass_batch.assign(pass_batch)
        self._manager.save(checkpoint_number=self._done)
        self._saved_at = self._done

    def save_now(self) -> str:
        """Saves the state after the batches trained so far (on preemption), unless a periodic save of this
        batch wrote it already (no second write inside the grace period); returns its path."""
        if self._saved_at != self._done:
            self._save()
        return self._manager.latest_checkpoint

    @property
    def latest_checkpoint(self):
        """The latest resume checkpoint's path, or None."""
        return self._manager.latest_checkpoint

    def on_train_batch_end(self, batch, logs=None):
        self._done += 1
        steps = (self.params or {}).get("steps")
        ends_epoch = steps is not None and batch + 1 >= steps
        if self.save_steps and self._done % self.save_steps == 0 and not ends_epoch:
            self._save()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.assign(epoch + 1)
        self._save()


class BestOnDev(keras.callbacks.Callback):
    """After each epoch: evaluates dev, logs the results, and saves the model when the selection metric improves.

    The best value survives restarts in ``output_dir/best_dev.json``.

    Args:
        evaluate: model -> dict of metrics on dev.
        metric: the key to maximise (pearson, matthew_corr, accuracy, f1...).
        save: model -> None, writes the fine-tuned model to output_dir.
        output_dir: where best_dev.json lives.
        summaries: optional `ScalarSummaries` to record dev results.
        on_improvement: optional results -> None, called after each save
            (e.g. to record the SQuAD v2 threshold beside the saved model).
    """

    def __init__(self, evaluate: Callable[[keras.Model], Dict[str, float]], metric: str,
                 save: Callable[[keras.Model], None], output_dir: str,
                 summaries: Optional[ScalarSummaries] = None,
                 on_improvement: Optional[Callable[[Dict[str, float]], None]] = None):
        super().__init__()
        self.on_improvement = on_improvement
        self.evaluate = evaluate
        self.metric = metric
        self.save = save
        self.path = os.path.join(output_dir, BEST_STATE_FILE)
        self.summaries = summaries
        self.best: Optional[Dict[str, float]] = None
        if tf.io.gfile.exists(self.path):  # gfile: on a gs:// output_dir too, or a resume forgets the best
            self.best = read_json(self.path)

    def on_epoch_end(self, epoch, logs=None):
        results = self.evaluate(self.model)
        if self.metric not in results:
            raise KeyError(f"Dev results have no selection metric {self.metric!r}: {sorted(results)}")
        if self.summaries is not None:
            self.summaries.write_eval(results)
        value = float(results[self.metric])
        best = None if self.best is None else float(self.best[self.metric])
        improved = best is None or value > best or (math.isnan(best) and not math.isnan(value))
        logging.info("Epoch %d dev: %s%s", epoch + 1,
                     ", ".join(f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}"
                               for k, v in sorted(results.items())),
                     " (best so far: saved)" if improved else f" (best {self.metric} {best:.4f} kept)")
        if improved:
            self.save(self.model)
            if self.on_improvement is not None:
                self.on_improvement(results)
            self.best = {**{k: float(v) for k, v in results.items() if isinstance(v, (int, float))},
                         "epoch": epoch + 1}
            with atomic_write(self.path, "w") as f:
                json.dump(self.best, f, indent=1, sort_keys=True)
