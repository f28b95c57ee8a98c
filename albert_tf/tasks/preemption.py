"""SIGTERM / SIGINT during `model.fit`: save the resume state at the step, then stop.

`StopOnPreemption` asks a `albert_tf.preemption.PreemptionWatcher` after
every batch. On a signal it saves the `ResumeCheckpoint` of the batches done
(model, optimizer slots, dropout seed states, data position) and raises
`Preempted` out of `model.fit`, so no epoch-end work (dev evaluation, the
epoch's resume save) runs for a half-done epoch. A signal on the last batch of
an epoch (or during its dev evaluation) waits for the epoch end instead: the
epoch's dev evaluation and best-model save happen as in an uninterrupted run,
then the run stops. The same command resumes exactly there.
"""

from __future__ import annotations

import keras

from albert_tf.preemption import Preempted, PreemptionWatcher


class StopOnPreemption(keras.callbacks.Callback):
    """Checkpoints and raises `Preempted` once `watcher` saw a signal.

    Put it after the `ResumeCheckpoint` (and `BestOnDev`) in the callback
    list: it relies on their batch and epoch bookkeeping having run.

    Args:
        watcher: an entered `PreemptionWatcher`.
        resume: the run's `albert_tf.tasks.callbacks.ResumeCheckpoint`.
    """

    def __init__(self, watcher: PreemptionWatcher, resume):
        super().__init__()
        self.watcher = watcher
        self.resume = resume

    def _stop(self, save: bool) -> None:
        path = self.resume.save_now() if save else self.resume.latest_checkpoint
        step = int(self.model.optimizer.iterations.numpy())
        raise Preempted(self.watcher.reason, step, path)

    def on_train_batch_end(self, batch, logs=None):
        if not self.watcher.should_stop():
            return
        steps = (self.params or {}).get("steps")
        if steps is not None and batch + 1 >= steps:
            return  # the epoch ends with this batch: stop after its end (on_epoch_end)
        self._stop(save=True)

    def on_epoch_end(self, epoch, logs=None):
        if self.watcher.should_stop():
            self._stop(save=False)  # ResumeCheckpoint.on_epoch_end saved this epoch
