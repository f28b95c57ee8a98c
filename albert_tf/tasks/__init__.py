"""Fine-tuning tasks: per task family, its reader, model, loss, metrics and prediction files.

`run_finetuning` (albert_tf.tasks.runner) drives them; `get_task` maps a
--task value to its task object.
"""

from albert_tf.tasks.base import FinetuneTask, TaskOptions
from albert_tf.tasks.registry import get_task, task_names
from albert_tf.tasks.runner import FinetuneOptions, run_finetuning

__all__ = ["FinetuneOptions", "FinetuneTask", "TaskOptions", "get_task", "run_finetuning", "task_names"]
