"""Preemption: stop at a step boundary on SIGTERM / SIGINT, with a checkpoint.

A preemptible cloud VM or a cluster scheduler sends SIGTERM some seconds
before it kills a job; Ctrl-C sends SIGINT. While `PreemptionWatcher` is
active, such a signal only sets a flag: the training loop finishes the step it
is in, asks `should_stop()` after every step, writes a checkpoint at that step
(weights, optimizer slots, step, dropout RNG state, data position) and raises
`Preempted`. The binaries turn `Preempted` into one line naming the checkpoint
and exit code `EXIT_PREEMPTED` (75, EX_TEMPFAIL of sysexits.h: "try again
later"); running the same command again resumes exactly there.

A second signal while the first is being handled restores the previous
handler and re-delivers the signal: Ctrl-C twice stops at once.

Several workers (`tf.distribute.MultiWorkerMirroredStrategy`) must agree on
the step: `should_stop` all-reduces the flag across workers after every step
(one scalar collective, every worker calls it once a step), so every worker
saves the same step and stops, whichever of them got the signal. Replicas in
one process (MirroredStrategy, TPU) share the process's flag.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Optional, Sequence

from absl import logging

EXIT_PREEMPTED = 75  # EX_TEMPFAIL: the run can be continued by the same command
SIGNALS = (signal.SIGTERM, signal.SIGINT)

# The entered watchers, and a stop requested while none was (`request_stop`).
_ACTIVE: list = []
_PENDING: list = []
_REGISTRY_LOCK = threading.Lock()


def request_stop(reason: str) -> None:
    """Asks the training loop to stop after its current step with a checkpoint, as a signal does.

    Thread-safe (the lease's heartbeat thread calls it when another writer took
    the output folder over); a request made while no `PreemptionWatcher` is
    active is taken by the next one entered.

    Args:
        reason: what stopped the run, for the line (e.g. "the loss of the lease ...").
    """
    with _REGISTRY_LOCK:
        watchers = list(_ACTIVE)
        if not watchers:
            _PENDING.append(reason)
    logging.warning("Stop requested: %s; finishing the current step, then writing a checkpoint.", reason)
    for watcher in watchers:
        watcher.request(reason, announce=False)


class Preempted(Exception):
    """Training stopped on a signal after writing a checkpoint.

    Args:
        reason: what stopped it ("SIGTERM", "SIGINT", "another worker's signal").
        step: the last completed step (the checkpoint's step).
        checkpoint: the checkpoint written at that step.
    """

    exit_code = EXIT_PREEMPTED

    def __init__(self, reason: str, step: int, checkpoint: Optional[str]):
        self.reason, self.step, self.checkpoint = reason, int(step), checkpoint
        super().__init__(
            f"stopped by {reason} after step {self.step}: checkpoint {checkpoint} written; "
            f"run the same command again to resume from it (exit code {EXIT_PREEMPTED}).")


class PreemptionWatcher:
    """Turns SIGTERM / SIGINT into a flag that the training loop polls after each step.

    A context manager: installs its handlers on enter (main thread only:
    Python runs signal handlers there; elsewhere it only watches `request`)
    and restores the previous ones on exit.

    Args:
        strategy: the run's `tf.distribute.Strategy`; under
            MultiWorkerMirroredStrategy `should_stop` agrees across workers
            (a collective: every worker must call it once a step).
        signals: the signals to catch.

    Example:

    >>> import os, signal
    >>> with PreemptionWatcher() as watcher:
    ...     os.kill(os.getpid(), signal.SIGTERM)
    ...     watcher.should_stop(), watcher.reason
    (True, 'SIGTERM')
    """

    def __init__(self, strategy=None, signals: Sequence[int] = SIGNALS):
        self._signals = tuple(signals)
        self._previous = {}
        self._received: Optional[str] = None
        self._agreed = False
        self._reduce = None
        if strategy is not None:
            import tensorflow as tf

            if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
                self._reduce = _any_worker_function(strategy)

    @property
    def reason(self) -> Optional[str]:
        """The signal received here, "another worker's signal", or None."""
        if self._received:
            return self._received
        return "another worker's signal" if self._agreed else None

    def request(self, name: str = "a stop request", announce: bool = True) -> None:
        """Asks the loop to stop after the current step (what the handler does; `announce`: log it)."""
        if self._received is None:
            self._received = name
            if announce:
                logging.warning("%s received: finishing the current step, then writing a checkpoint "
                                "(send it again to stop at once).", name)

    def _handle(self, signum, frame) -> None:
        if self._received is not None:  # the second signal: stop at once
            previous = self._previous.get(signum, signal.SIG_DFL)
            signal.signal(signum, previous)
            if callable(previous):
                previous(signum, frame)
            else:
                os.kill(os.getpid(), signum)
            return
        self.request(signal.Signals(signum).name)

    def should_stop(self) -> bool:
        """Whether to checkpoint and stop now (the same answer on every worker)."""
        if self._reduce is not None:
            import tensorflow as tf

            self._agreed = bool(self._reduce(tf.constant(1.0 if self._received else 0.0)) > 0)
            return self._agreed
        return self._received is not None

    def __enter__(self) -> "PreemptionWatcher":
        if threading.current_thread() is threading.main_thread():
            for signum in self._signals:
                if signal.getsignal(signum) is signal.SIG_IGN:
                    continue  # e.g. SIGINT of a background job: it stays ignored
                self._previous[signum] = signal.signal(signum, self._handle)
        with _REGISTRY_LOCK:
            _ACTIVE.append(self)
            pending = list(_PENDING)
            _PENDING.clear()
        for reason in pending:
            self.request(reason, announce=False)
        return self

    def __exit__(self, *exc) -> None:
        with _REGISTRY_LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()


def _any_worker_function(strategy):
    """A tf.function: the sum over all replicas of a per-worker scalar flag."""
    import tensorflow as tf

    @tf.function
    def any_worker(flag):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(flag)),
                               axis=None)

    return any_worker
