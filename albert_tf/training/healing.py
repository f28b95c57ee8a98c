"""Training that heals itself: `--on_nonfinite=rollback`.

ALBERT-xxlarge and other large runs sometimes diverge: the loss jumps far
above its recent level (a spike) or becomes NaN / inf, and does not come back.
The usual remedy (PaLM, OPT) is by hand: go back to a checkpoint before the
spike, skip the batches read since, lower the learning rate, go on. With
`RecoveryConfig(on_nonfinite="rollback")` the loop does it itself:

* **the event**: a step whose loss is non-finite, or above
  `loss_spike_factor` (default 2) times the median of the last
  `loss_spike_window` (default 100) step losses, looked for once that many
  steps have been seen; or weights found non-finite before a save. The
  median, not the mean, so that one earlier spike or a noisy step does not
  raise the bar; a factor of 2 is far above the step-to-step noise of a
  large-batch loss (a few percent at batch 4096) and far below a real
  divergence (loss several times its level, or NaN); early training only
  falls, which never looks like a spike. Every step's loss is checked (one
  host fetch per step), so the event is found at its own step whatever
  --log_steps is;
* **the rollback**: the last checkpoint on disk is restored (weights,
  optimizer slots, step, dropout RNG, the loss window). On disk, not a copy
  in memory: it is what a resumed run restores anyway, so a run killed after
  the event and resumed lands on exactly the same state, and it needs no
  second copy of the weights and slots (2.7 GB for xxlarge). The price is the
  grain: --save_checkpoints_steps (a rollback redoes up to that many steps;
  PaLM went back about 100 steps). A fresh run with rollback writes
  ckpt-<start> first, so that there is always one;
* **the data window**: the batches of the steps since that checkpoint are
  skipped (the bad batch and the run-up to it: which of them caused the
  divergence cannot be told, and replaying them would reproduce it exactly).
  The count of batches skipped so far (`RecoveryState.data_offset`) is saved
  in every checkpoint: the batch of step t is batch t + offset, and a resumed
  run positions its input there. A run resumed from a checkpoint written
  before an event replays up to it and meets the same event at the same step;
* **the learning rate** is multiplied by `rollback_learning_rate_factor` at
  each rollback (default 1: unchanged), through `ScaledSchedule`; the factor
  so far is saved too;
* **the log**: one line per event; after `max_rollbacks` rollbacks the next
  event ends the run with one line (a TrainingError).

No checkpoint with non-finite weights is written, with either setting: every
save checks the weights and optimizer slots first (`all_finite`).

Example (the guard alone):

>>> from albert_tf.training.configs import RecoveryConfig
>>> guard = LossGuard(RecoveryConfig(on_nonfinite="rollback", loss_spike_window=3))
>>> for step, loss in enumerate([4.0, 3.8, 3.9, 3.7], 1):
...     guard.check(step, loss)
>>> try:
...     guard.check(5, 9.0)
... except Divergence as event:
...     print(event.reason)
loss 9 is above 2 x the median 3.8 of the last 3 steps
"""

from __future__ import annotations

import collections
import math
from typing import Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.training.common import TrainingError
from albert_tf.training.configs import MAX_LOSS_SPIKE_WINDOW, RecoveryConfig


class Divergence(TrainingError):
    """A step whose loss is non-finite or a spike (or weights non-finite).

    Args:
        step: the step whose loss (or weights) was found bad.
        loss: its loss.
        reason: one phrase, e.g. "loss nan" or "loss 9 is above 2 x ...".
    """

    def __init__(self, step: int, loss: float, reason: str):
        self.step, self.loss, self.reason = int(step), float(loss), reason
        super().__init__(f"{reason} at step {self.step}")


class RecoveryState(tf.Module):
    """What a rollback changes that the checkpoint must carry (created in the
    strategy's scope; every worker holds the same values).

    Attributes:
        data_offset: batches skipped so far, in steps: step t reads batch
            t + data_offset of the input.
        rollbacks: rollbacks so far in this run's history.
        lr_scale: the learning-rate factor the rollbacks applied.
        recent_losses: the last losses of the guard's window, oldest first,
            right-aligned in MAX_LOSS_SPIKE_WINDOW slots.
        losses_seen: steps the guard has seen (how much of the window is real).
    """

    def __init__(self):
        super().__init__(name="recovery")
        kw = dict(trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.data_offset = tf.Variable(0, dtype=tf.int64, name="data_offset", **kw)
        self.rollbacks = tf.Variable(0, dtype=tf.int64, name="rollbacks", **kw)
        self.lr_scale = tf.Variable(1.0, dtype=tf.float32, name="lr_scale", **kw)
        self.recent_losses = tf.Variable(tf.zeros([MAX_LOSS_SPIKE_WINDOW]), name="recent_losses", **kw)
        self.losses_seen = tf.Variable(0, dtype=tf.int64, name="losses_seen", **kw)


class ScaledSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule(step) * scale`, with `scale` a variable (1.0 changes nothing:
    a float32 product with 1 is exact).

    >>> scale = tf.Variable(0.5)
    >>> float(ScaledSchedule(lambda step: tf.constant(0.1), scale)(3))
    0.05000000074505806
    """

    def __init__(self, schedule, scale: tf.Variable):
        self.schedule, self.scale = schedule, scale

    def __call__(self, step):
        rate = self.schedule(step)
        return rate * tf.cast(self.scale, rate.dtype)

    def get_config(self):
        config = dict(self.schedule.get_config()) if hasattr(self.schedule, "get_config") else {}
        config["scale"] = float(self.scale.numpy())
        return config


def all_finite(variables):
    """A function returning whether every float variable is finite (one bool).

    >>> all_finite([tf.Variable([1.0, 2.0])])(), all_finite([tf.Variable([1.0, np.nan])])()
    (True, False)
    """
    floats = [v for v in variables if tf.as_dtype(v.dtype).is_floating]  # Keras: a str

    @tf.function
    def check():
        return tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in floats])

    return lambda: bool(check())


class LossGuard:
    """Checks every step's loss: non-finite, or a spike over the recent median.

    Args:
        config: the spike factor and window.
        state: the `RecoveryState` to load the window from and store it to
            (None: kept in memory only).
    """

    def __init__(self, config: RecoveryConfig, state: Optional[RecoveryState] = None):
        self.factor, self.window = config.loss_spike_factor, config.loss_spike_window
        self._state = state
        self._losses = collections.deque(maxlen=MAX_LOSS_SPIKE_WINDOW)
        self._seen = 0
        if state is not None:
            self.load()

    def load(self) -> None:
        """Takes the window from the state (after a restore)."""
        self._seen = int(self._state.losses_seen.numpy())
        kept = min(self._seen, MAX_LOSS_SPIKE_WINDOW)
        self._losses.clear()
        self._losses.extend(self._state.recent_losses.numpy()[MAX_LOSS_SPIKE_WINDOW - kept:])

    def store(self) -> None:
        """Writes the window into the state (before a save)."""
        values = np.zeros([MAX_LOSS_SPIKE_WINDOW], np.float32)
        if self._losses:
            values[MAX_LOSS_SPIKE_WINDOW - len(self._losses):] = np.asarray(self._losses, np.float32)
        self._state.recent_losses.assign(values)
        self._state.losses_seen.assign(self._seen)

    def check(self, step: int, loss: float) -> None:
        """Adds a good step's loss to the window; Divergence for a bad one."""
        if not math.isfinite(loss):
            raise Divergence(step, loss, f"loss {loss}")
        if self.factor and self._seen >= self.window:
            recent = np.asarray(self._losses, np.float32)[-self.window:]
            median = float(np.median(recent))
            if loss > self.factor * median:
                raise Divergence(step, loss, f"loss {loss:.4g} is above {self.factor:g} x the median "
                                             f"{median:.4g} of the last {self.window} steps")
        # float32, as stored: a resumed run's window is this one exactly.
        self._losses.append(np.float32(loss))
        self._seen += 1


def _batches(first_step: int, last_step: int, offset: int) -> str:
    """The steps and input batches of a window, in words.

    >>> _batches(11, 12, 0), _batches(17, 17, 2)
    ('steps 11-12 (input batches 11-12)', 'step 17 (input batch 19)')
    """
    if first_step == last_step:
        return f"step {first_step} (input batch {first_step + offset})"
    return (f"steps {first_step}-{last_step} "
            f"(input batches {first_step + offset}-{last_step + offset})")


class Healer:
    """Rolls the run back to its last checkpoint and skips the data since.

    Args:
        config: the rollback settings.
        state: the run's `TrainState` (with `recovery` and `restore`).
        output_dir: where the run's checkpoints are (every worker restores
            the chief's, as a resumed run does).
    """

    def __init__(self, config: RecoveryConfig, state, output_dir: str):
        self.config, self.state, self.output_dir = config, state, output_dir
        self.guard = LossGuard(config, state.recovery)

    def rollback(self, event: Divergence) -> int:
        """Restores the last checkpoint after `event`; returns its step.

        Raises:
            TrainingError: `max_rollbacks` rollbacks were made already, or
                there is no checkpoint to go back to.
        """
        recovery, config = self.state.recovery, self.config
        count = int(recovery.rollbacks.numpy()) + 1
        offset = int(recovery.data_offset.numpy())
        scale = float(recovery.lr_scale.numpy()) * config.rollback_learning_rate_factor
        path = tf.train.latest_checkpoint(self.output_dir)
        if count > config.max_rollbacks or path is None:
            raise TrainingError(
                f"Training diverged again: {event.reason} at step {event.step}, after "
                f"{count - 1} rollback(s) (--max_rollbacks={config.max_rollbacks}). Last good "
                f"checkpoint: {path or 'none'}. Lower --learning_rate, check the data near input "
                f"batch {event.step + offset}, or allow more rollbacks.")
        self.state.restore(path)
        restored = self.state.step
        skipped = event.step - restored
        recovery.data_offset.assign(offset + skipped)
        recovery.rollbacks.assign(count)
        recovery.lr_scale.assign(scale)
        self.guard.load()
        rate = ("" if config.rollback_learning_rate_factor == 1 else
                f"; learning rate x{scale:g} from now on")
        logging.warning(
            "Rollback %d of at most %d: %s at step %d; restored %s (step %d) and skipped the "
            "input of %s%s.", count, config.max_rollbacks, event.reason, event.step, path, restored,
            _batches(restored + 1, event.step, offset), rate)
        return restored
