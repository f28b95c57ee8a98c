"""Workers that resume together: every MultiWorkerMirroredStrategy worker must restore the same state.

Each worker restores `tf.train.latest_checkpoint(output_dir)` on its own. When
the workers do not see the same folder (a local disk per host, a stale network
file system cache, a copied folder), one of them resumes at step N while
another starts at step 0 from random weights; they would then train in lockstep
on gradients of models that differ, and the chief would end with exit 0. So,
right after restoring, the workers gather their step and data offset (one
collective) and stop, all of them, in one line naming the values when they
differ.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import tensorflow as tf

from albert_tf import runtime
from albert_tf.training.common import TrainingError

SHARED_FOLDER_NOTE = ("--output_dir must be one folder that every worker sees (gs://..., or a shared file "
                      "system), not a local folder per host")


def _gather_function(strategy: tf.distribute.Strategy):
    """A tf.function: every replica's [1, k] int64 row, gathered on every worker ([replicas, k])."""

    @tf.function
    def gather(row):
        per_replica = strategy.run(lambda: tf.identity(row))
        return strategy.gather(per_replica, axis=0)

    return gather


def _worker_name(is_chief_type: int, task_id: int) -> str:
    return "chief" if is_chief_type else f"worker {task_id}"


def disagreement(rows: List[Tuple[int, int, int, int]]) -> Optional[str]:
    """What differs among the workers' (chief type, task id, step, data offset) rows; None when nothing does.

    >>> disagreement([(0, 0, 2, 0), (0, 1, 2, 0)]) is None
    True
    >>> disagreement([(0, 0, 2, 0), (0, 1, 0, 0)])
    'worker 0 restored step 2 and worker 1 step 0'
    >>> disagreement([(1, 0, 4, 1), (0, 0, 4, 0)])
    'chief restored data offset 1 and worker 0 data offset 0'
    """
    for column, what in ((2, "step"), (3, "data offset")):
        high = max(rows, key=lambda row: row[column])
        low = min(rows, key=lambda row: row[column])
        if high[column] != low[column]:
            return (f"{_worker_name(*high[:2])} restored {what} {high[column]} and "
                    f"{_worker_name(*low[:2])} {what} {low[column]}")
    return None


def check_workers_agree(strategy: tf.distribute.Strategy, step: int, data_offset: int,
                        resumed_from: Optional[str], output_dir: str) -> None:
    """Stops every worker of a multi-worker run whose workers restored different states.

    A collective: every worker must call it at the same point (right after
    restoring). Other strategies (one process) return at once.

    Args:
        strategy: the run's strategy.
        step: the global step this worker restored (0 for a fresh start).
        data_offset: the input batches this worker's restored state skips
            beyond `step` (rollbacks).
        resumed_from: the checkpoint this worker restored, or None.
        output_dir: this worker's --output_dir.

    Raises:
        TrainingError: (one line, on every worker) the steps or data offsets
            differ, naming the highest and the lowest and where they come from.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    task_type, task_id = runtime.worker_task(strategy)
    row = tf.constant([[int(task_type == "chief"), task_id, step, data_offset]], tf.int64)
    rows = [tuple(int(v) for v in r) for r in _gather_function(strategy)(row).numpy()]
    differs = disagreement(rows)
    if differs is None:
        return
    here = _worker_name(int(task_type == "chief"), task_id)
    source = f"from {resumed_from}" if resumed_from else f"nothing (no checkpoint in {output_dir})"
    raise TrainingError(
        f"The workers did not restore the same training state: {differs} (this worker, {here}, restored "
        f"{source}); {SHARED_FOLDER_NOTE}. Nothing was trained; give every worker the same --output_dir "
        "and run again.")
