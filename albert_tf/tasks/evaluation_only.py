"""Evaluation and prediction without training: from any fine-tuned model folder into any output folder.

`albert-finetune --do_eval/--do_predict` without `--do_train` reads the fine-tuned model of
`--init_checkpoint` (an albert-finetune `--output_dir`, or a folder written by `albert_tf.save_task_model`)
and writes eval_results.txt and the prediction files to `--output_dir` only: the model's folder is read,
never locked or written, so it may be read-only or in use by another run. Without `--init_checkpoint` the
model is the one a training run saved in `--output_dir`, as before; so is it when `--init_checkpoint` is
the pretrained model that run started from (the training command again, without `--do_train`). Any other
folder with no task head (an albert-pretrain output, a released or Hugging Face encoder) is refused in one
line naming what it lacks.
The labels, the length and the lower-casing are the saved model's (`FinetuneTask.adopt_saved_model`).
"""

from __future__ import annotations

import os
from typing import Optional

from absl import logging


def model_folder(options) -> Optional[str]:
    """The fine-tuned model an evaluation-only run reads: --init_checkpoint, else --output_dir.

    --init_checkpoint with a task head (task_config.json) is read; one without is accepted only as the
    pretrained start of the model --output_dir holds (`trained_from`), whose fine-tuned model is then read.

    Args:
        options: the run's `FinetuneOptions`.

    Returns:
        The folder, or None for a training run (--do_train).

    Raises:
        FileNotFoundError: the folder does not exist, or holds no task model (one line naming what is
            missing and what to do).
    """
    import tensorflow as tf

    from albert_tf.models.task_io import TASK_CONFIG_FILENAME

    if options.do_train:
        return None
    if not options.init_checkpoint:
        if not tf.io.gfile.exists(os.path.join(options.output_dir, TASK_CONFIG_FILENAME)):
            raise FileNotFoundError(
                f"--output_dir={options.output_dir!r} holds no fine-tuned model (no {TASK_CONFIG_FILENAME}): "
                "without --do_train, --do_eval/--do_predict evaluate the fine-tuned model of --init_checkpoint, "
                "else the one a training run saved in --output_dir.")
        return options.output_dir
    folder = options.init_checkpoint
    if tf.io.gfile.exists(os.path.join(folder, TASK_CONFIG_FILENAME)):
        return folder
    if trained_from(options.output_dir, folder):
        logging.info("--init_checkpoint=%s is the pretrained model the fine-tuned model of --output_dir=%s was "
                     "trained from: evaluating the fine-tuned one.", folder, options.output_dir)
        return options.output_dir
    if not tf.io.gfile.exists(folder) and not tf.io.gfile.exists(folder + ".index"):
        raise FileNotFoundError(f"--init_checkpoint={folder!r} does not exist.")
    raise FileNotFoundError(
        f"--init_checkpoint={folder!r} holds no task head (no {TASK_CONFIG_FILENAME}): it is an encoder or "
        "pretraining model; without --do_train, --do_eval/--do_predict need a fine-tuned model (an "
        "albert-finetune --output_dir or a save_task_model folder); add --do_train to fine-tune it first.")


def trained_from(output_dir: str, init_checkpoint: str) -> bool:
    """Whether `output_dir` holds a fine-tuned model that a run started from `init_checkpoint` trained.

    So the training command run again without --do_train (its --init_checkpoint the pretrained start)
    evaluates the model it trained, as before. Read from the run's finetune_run.json.

    Args:
        output_dir: the run's --output_dir.
        init_checkpoint: the --init_checkpoint given now.
    """
    import tensorflow as tf

    from albert_tf.models.task_io import TASK_CONFIG_FILENAME
    from albert_tf.tasks.run_state import RUN_STATE_FILE
    from pipelines.fileio import read_json

    state_file = os.path.join(output_dir, RUN_STATE_FILE)
    if not (tf.io.gfile.exists(os.path.join(output_dir, TASK_CONFIG_FILENAME)) and tf.io.gfile.exists(state_file)):
        return False
    recorded = read_json(state_file).get("init_checkpoint")
    return bool(recorded) and _same_path(recorded, init_checkpoint)


def _same_path(a: str, b: str) -> bool:
    """Two spellings of one path (local paths compared absolute; URLs as written, less a trailing slash).

    >>> _same_path("runs/base/", "./runs/base"), _same_path("gs://b/x/", "gs://b/x"), _same_path("a", "b")
    (True, True, False)
    """
    from pipelines.fileio import absolute

    return absolute(a).rstrip("/") == absolute(b).rstrip("/")


def load_model(folder: str, options, strategy):
    """The fine-tuned model of `folder`, read only (`albert_tf.load_task_model`), XLA-compiled with --jit_compile.

    Args:
        folder: `model_folder`'s answer.
        options: the run's `FinetuneOptions`.
        strategy: the run's distribution strategy (the model is built in its scope).
    """
    import albert_tf
    from albert_tf.tasks import static_shapes

    if folder != options.output_dir:
        logging.info("Evaluating the fine-tuned model of --init_checkpoint=%s (read only); results go to %s.",
                     folder, options.output_dir)
    with strategy.scope():
        model = albert_tf.load_task_model(folder)
    return static_shapes.compile_for_xla(model) if options.jit_compile else model
