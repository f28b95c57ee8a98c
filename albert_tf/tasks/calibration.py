"""A fine-tuned classifier's own task data, for its int8 export: the train split calibrates, the dev split measures.

An albert-finetune output folder records its task, data folder and reader
settings (finetune_run.json) and its labels (task_config.json), so
`albert-export --format=openvino --quantize=int8 --checkpoint=<that folder>`
finds the texts it trained on without more flags; `--calibration_data_dir`
names another folder of the same layout (the run's may be gone, or on
another machine). Classification tasks only (glue/*, csv): the heads with an
OpenVINO export.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Tuple

from albert_tf.export.int8 import TextSet

CLASSIFICATION_PREFIXES = ("glue/", "csv")


def recorded_run(folder: str) -> Optional[dict]:
    """The folder's finetune_run.json (its fine-tuning run's settings), or None when it has none."""
    import tensorflow as tf

    from albert_tf.tasks.run_state import RUN_STATE_FILE

    path = os.path.join(folder, RUN_STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        return json.load(f)


def task_text_sets(folder: str, data_dir: Optional[str] = None) -> Tuple[Optional[TextSet], Optional[TextSet]]:
    """(train, dev) of the classifier in `folder`, labels as the model knows them; (None, None) when the folder
    records no fine-tuning run and no `data_dir` is given.

    Args:
        folder: an albert-finetune output folder (finetune_run.json, task_config.json).
        data_dir: the task's data folder; None: the one its run recorded.

    Raises:
        ValueError: the run was not a classification task, or no data folder is known.
        FileNotFoundError: the data folder has no train split.
    """
    import tensorflow as tf

    from albert_tf.models.task_io import TASK_CONFIG_FILENAME
    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.registry import get_task

    run = recorded_run(folder)
    if run is None:
        if data_dir:
            raise ValueError(f"--calibration_data_dir={data_dir!r}: --checkpoint={folder!r} records no fine-tuning "
                             "run (finetune_run.json), so its task and columns are unknown; give --calibration_file.")
        return None, None
    name = run.get("task", "")
    if not name.startswith(CLASSIFICATION_PREFIXES):
        raise ValueError(f"--quantize=int8: --checkpoint={folder!r} was fine-tuned on --task={name}; the OpenVINO "
                         "export (and its int8 form) covers classifiers and encoders.")
    data_dir = data_dir or run.get("data_dir")
    if not data_dir:
        raise ValueError(f"--checkpoint={folder!r} records no data folder: give --calibration_data_dir or "
                         "--calibration_file.")
    options = TaskOptions(max_seq_length=run.get("max_seq_length"), do_lower_case=run.get("do_lower_case", True),
                          **{key: run[key] for key in ("text_column", "text_b_column", "label_column", "regression")
                             if key in run})
    task = get_task(name, options)
    with tf.io.gfile.GFile(os.path.join(folder, TASK_CONFIG_FILENAME), "r") as f:
        task.adopt_saved_model(json.load(f))
    try:
        train = task.read(data_dir, "train")
    except FileNotFoundError as e:
        raise FileNotFoundError(f"--calibration_data_dir={data_dir!r}: no train split for --task={name} ({e}); give "
                                "--calibration_file or the task's data folder.") from None
    try:
        dev = task.read(data_dir, "dev")
    except FileNotFoundError:
        dev = None
    return _text_set(train, f"{data_dir} train split"), _text_set(dev, f"{data_dir} dev split")


def _text_set(data, source: str) -> Optional[TextSet]:
    """A `ClassificationData` split as a `TextSet` (None for a missing or empty split)."""
    if data is None or not len(data):
        return None
    return TextSet(list(data.texts), None if data.text_pairs is None else list(data.text_pairs), data.labels, source)
