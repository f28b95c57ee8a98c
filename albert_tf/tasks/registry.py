"""--task names -> task objects.

Example:
>>> from albert_tf.tasks.base import TaskOptions
>>> get_task("glue/cola", TaskOptions()).selection_metric
'matthew_corr'
>>> sorted(task_names())[:3]
['csv', 'glue/cola', 'glue/mnli']
"""

from __future__ import annotations

from typing import List

from albert_tf.tasks.base import FinetuneTask, TaskOptions

# GLUE task names as --task=glue/<name> takes them (the original's processors).
GLUE_TASKS = ("cola", "sst-2", "mrpc", "sts-b", "qqp", "mnli", "mnli-mm", "qnli", "rte", "wnli")
OTHER_TASKS = ("csv", "squad_v1", "squad_v2", "race", "tagging")


def task_names() -> List[str]:
    """Every value --task accepts."""
    return [f"glue/{name}" for name in GLUE_TASKS] + list(OTHER_TASKS)


def get_task(name: str, options: TaskOptions) -> FinetuneTask:
    """The task object for a --task value.

    Args:
        name: e.g. "glue/sst-2", "csv", "squad_v2", "race", "tagging".
        options: reader/model settings.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    key = (name or "").strip().lower()
    if key.startswith("glue/") and key[len("glue/"):] in GLUE_TASKS:
        from albert_tf.tasks.classification import GlueTask

        return GlueTask(key, options)
    if key == "csv":
        from albert_tf.tasks.classification import CsvTask

        return CsvTask(key, options)
    if key in ("squad_v1", "squad_v2"):
        from albert_tf.tasks.span_qa import SquadTask

        return SquadTask(key, options)
    if key == "race":
        from albert_tf.tasks.multiple_choice import RaceTask

        return RaceTask(key, options)
    if key == "tagging":
        from albert_tf.tasks.tagging import TaggingTask

        return TaggingTask(key, options)
    raise ValueError(f"--task={name!r} is not a known task; expected one of: {', '.join(task_names())}.")
