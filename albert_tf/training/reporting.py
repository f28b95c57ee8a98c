"""What the loop tells the user, and when it stops.

`MetricsLogger` collects each step's loss-term sums (fetched from the device
only at log or checkpoint steps), stops on a non-finite loss, and writes one
log line, TensorBoard scalars and a callback dict per interval. `StopPolicy`
decides when the loop ends: num_train_steps, or the time budget (agreed by
every worker of a multi-worker run).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.models.pretrainer import LOSS_TERM_KEYS, pretraining_losses
from albert_tf.training.common import TrainingError, write_scalar_summary

_SUMMARY_KEYS = ("loss", "mlm_loss", "sop_loss", "mlm_accuracy",
                 "sop_accuracy", "learning_rate", "examples_per_second")


def format_eta(seconds: float) -> str:
    """`1h02m03s`; "?" when unknown.

    Example:

    >>> format_eta(3723.4), format_eta(float("inf"))
    ('1h02m03s', '?')
    """
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def losses_from_sums(sums: Dict[str, float]) -> Dict[str, float]:
    """`pretraining_losses` of host-side sums, as Python floats."""
    return {k: float(v) for k, v in pretraining_losses(sums).items()}


class MetricsLogger:
    """Per-interval training metrics: log line, TensorBoard, callback.

    Args:
        schedule: the learning-rate schedule (for the logged rate).
        num_train_steps: for the step count and ETA.
        train_batch_size: global batch (for examples/s).
        writer: a `tf.summary` writer (a no-op one on non-chief workers).
        start_step: the step the run starts from.
        max_train_seconds: the time budget, which may end the run first.
        log_callback: called with each logged dict (step, loss, ...).
        check: called with (step, loss) for every step's loss at `flush`;
            may raise (`healing.LossGuard.check`). Default: a non-finite
            loss is a TrainingError naming the last good checkpoint.
    """

    def __init__(self, schedule, num_train_steps: int, train_batch_size: int,
                 writer, start_step: int,
                 max_train_seconds: Optional[float] = None,
                 log_callback: Optional[Callable[[Dict[str, Any]], None]] = None,
                 check: Optional[Callable[[int, float], None]] = None):
        self._schedule = schedule
        self._num_train_steps = num_train_steps
        self._train_batch_size = train_batch_size
        self._writer = writer
        self._max_train_seconds = max_train_seconds
        self._log_callback = log_callback
        self._check = check
        self._pending: List[Tuple[int, Dict[str, tf.Tensor]]] = []
        self._train_start = time.time()
        self.last: Dict[str, Any] = {}
        self._reset(start_step)

    def _reset(self, step: int) -> None:
        self._sums = {k: 0.0 for k in LOSS_TERM_KEYS}
        self._losses: List[float] = []
        self._start = time.time()
        self._first = step

    def restart(self, step: int) -> None:
        """Drops what was collected since the last log (a rollback to `step`)."""
        self._pending.clear()
        self._reset(step)

    def add(self, step: int, terms: Dict[str, tf.Tensor]) -> None:
        """Keeps a step's sums on the device until the next `flush`."""
        self._pending.append((step, terms))

    def flush(self, last_good_checkpoint: Optional[str]) -> None:
        """Fetches the pending sums; TrainingError on a non-finite loss."""
        for step, terms in self._pending:
            values = {k: float(v) for k, v in terms.items()}
            loss = losses_from_sums(values)["loss"]
            if self._check is not None:
                self._check(step, loss)
            elif not math.isfinite(loss):
                raise TrainingError(
                    f"Loss is {loss} at step {step}. Last good checkpoint: "
                    f"{last_good_checkpoint or 'none (no checkpoint yet)'}. "
                    "Lower --learning_rate, check the data, or use float32.")
            for k in LOSS_TERM_KEYS:
                self._sums[k] += values[k]
            self._losses.append(loss)
        self._pending.clear()

    def log(self, step: int) -> None:
        """Logs the interval since the last call (flush first)."""
        elapsed = max(time.time() - self._start, 1e-9)
        steps = step - self._first
        if steps == 0:
            return
        metrics: Dict[str, Any] = losses_from_sums(self._sums)
        # The mean of the steps' losses, as the original logs it; the other
        # ratios are over the whole interval.
        metrics["loss"] = float(np.mean(self._losses))
        metrics.update(
            step=step,
            learning_rate=float(self._schedule(step - 1)),
            examples_per_second=steps * self._train_batch_size / elapsed,
            eta_seconds=(self._num_train_steps - step) * elapsed / steps)
        if self._max_train_seconds is not None:
            metrics["eta_seconds"] = min(
                metrics["eta_seconds"],
                max(0.0, self._max_train_seconds -
                    (time.time() - self._train_start)))
        logging.info(
            "step %d/%d loss %.4f mlm_loss %.4f sop_loss %.4f mlm_acc %.4f "
            "sop_acc %.4f lr %.3g examples/s %.1f ETA %s", step,
            self._num_train_steps, metrics["loss"], metrics["mlm_loss"],
            metrics["sop_loss"], metrics["mlm_accuracy"],
            metrics["sop_accuracy"], metrics["learning_rate"],
            metrics["examples_per_second"], format_eta(metrics["eta_seconds"]))
        with self._writer.as_default(step=step):
            for key in _SUMMARY_KEYS:
                write_scalar_summary(key, metrics[key])
        self._writer.flush()
        if self._log_callback is not None:
            self._log_callback(dict(metrics))
        self.last = metrics
        self._reset(step)


class StopPolicy:
    """When to log, save and stop.

    Args:
        strategy: the run's strategy (multi-worker runs agree on stopping).
        num_train_steps: the last step.
        log_steps: log interval (and, multi-worker, time-budget checks).
        save_checkpoints_steps: checkpoint interval.
        max_train_seconds: time budget, or None.
    """

    def __init__(self, strategy: tf.distribute.Strategy, num_train_steps: int,
                 log_steps: int, save_checkpoints_steps: int,
                 max_train_seconds: Optional[float] = None):
        self.num_train_steps = num_train_steps
        self.log_steps = max(1, int(log_steps))
        self.save_steps = max(1, int(save_checkpoints_steps))
        self.max_train_seconds = max_train_seconds
        self._start = time.time()
        self._multi_worker = isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy)

        @tf.function
        def any_replica(flag):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(
                lambda: tf.identity(flag)), axis=None)

        self._any_replica = any_replica

    def out_of_time(self, step: int) -> bool:
        """True once the budget is spent (the same answer on every worker)."""
        if self.max_train_seconds is None:
            return False
        if self._multi_worker and step % self.log_steps:
            return False  # workers only agree at log steps (a collective)
        spent = time.time() - self._start > self.max_train_seconds
        if self._multi_worker:
            spent = bool(self._any_replica(tf.constant(float(spent))) > 0)
        return spent

    def decide(self, step: int) -> Tuple[bool, bool, bool]:
        """(log, save, stop) after `step` completed steps."""
        out_of_time = self.out_of_time(step)
        stop = step >= self.num_train_steps or out_of_time
        if out_of_time:
            logging.info("Time budget of %.0f s reached at step %d.",
                         self.max_train_seconds, step)
        return (step % self.log_steps == 0 or stop,
                step % self.save_steps == 0 or stop, stop)
