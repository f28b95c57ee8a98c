"""Pretrained vs random weights on one classification task, at the same budget.

The demo's fine-tuning stage and bench/studies/finetune_quality.py both call
`compare_pretrained_vs_random`: it fine-tunes the same task model twice with
identical data, steps, learning rate, seed and precision, once starting from
a pretrained folder and once from random weights of the same config, and
reports both dev accuracies with the majority-class baseline.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Dict, Optional

from absl import logging

from albert_tf.tasks.base import TaskOptions
from albert_tf.tasks.runner import FinetuneOptions, run_finetuning


@dataclasses.dataclass
class ComparisonSettings:
    """The shared budget of both runs.

    Attributes:
        max_seq_length: tokens per example.
        train_batch_size: global batch.
        learning_rate: peak AdamW rate (both runs).
        num_train_epochs: passes over the training split.
        warmup_proportion: linear warmup share.
        mixed_precision: auto, float32 or bfloat16.
        seed: head initialisation, dropout, data order.
        pooling: the classifier's input, "pooled" ([CLS], the original) or "mean".
        log_steps: progress-line interval.
    """

    max_seq_length: int = 64
    train_batch_size: int = 32
    learning_rate: float = 3e-4
    num_train_epochs: float = 1.0
    warmup_proportion: float = 0.1
    mixed_precision: str = "auto"
    seed: int = 12345
    log_steps: int = 50
    pooling: str = "pooled"


def _majority(task_dir: str, label_column: str = "label") -> Dict[str, Any]:
    import csv
    import io

    from pipelines.fileio import read_text
    from pipelines.stdlib_tasks import majority_baseline

    def labels(split):
        text = read_text(os.path.join(task_dir, f"{split}.csv"))
        return [row[label_column] for row in csv.DictReader(io.StringIO(text, newline=""))]

    label, accuracy = majority_baseline(labels("train"), labels("dev"))
    return {"majority_label": label, "majority_accuracy": accuracy}


def compare_pretrained_vs_random(task_dir: str, pretrained_dir: str, output_dir: str,
                                 settings: Optional[ComparisonSettings] = None) -> Dict[str, Any]:
    """Fine-tunes `--task=csv` on task_dir from pretrained_dir and from random weights.

    Args:
        task_dir: train.csv and dev.csv with `text,label` columns.
        pretrained_dir: an albert-tf model folder (albert_config.json,
            model.weights.safetensors, spm.model), e.g. albert-pretrain's
            output_dir.
        output_dir: gets `pretrained/` and `random/` (each an albert-finetune
            output folder).
        settings: the shared budget.

    Returns:
        dict with pretrained_accuracy, random_accuracy, majority_accuracy,
        majority_label, the seconds each run took, and the two models.

    Example:
    >>> r = compare_pretrained_vs_random("demo_output/topic_task", "demo_output/model",  # doctest: +SKIP
    ...                                  "/tmp/compare")
    >>> r["pretrained_accuracy"] > r["random_accuracy"]                                 # doctest: +SKIP
    True
    """
    import tensorflow as tf

    settings = settings or ComparisonSettings()
    spm_model_file = os.path.join(pretrained_dir, "spm.model")
    config_file = os.path.join(pretrained_dir, "albert_config.json")
    for path in (spm_model_file, config_file):
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"{path!r} is missing: the pretrained folder needs it.")
    result: Dict[str, Any] = _majority(task_dir)
    for name, weights in (("pretrained", {"init_checkpoint": pretrained_dir}),
                          ("random", {"albert_config_file": config_file})):
        options = FinetuneOptions(
            task="csv", data_dir=task_dir, output_dir=os.path.join(output_dir, name),
            task_options=TaskOptions(max_seq_length=settings.max_seq_length, spm_model_file=spm_model_file,
                                     pooling=settings.pooling),
            train_batch_size=settings.train_batch_size, eval_batch_size=128,
            learning_rate=settings.learning_rate, num_train_epochs=settings.num_train_epochs,
            warmup_proportion=settings.warmup_proportion, mixed_precision=settings.mixed_precision,
            do_train=True, do_eval=True, seed=settings.seed, log_steps=settings.log_steps, **weights)
        logging.info("Fine-tuning from %s weights.", name)
        started = time.time()
        run = run_finetuning(options)
        result[f"{name}_seconds"] = time.time() - started
        result[f"{name}_accuracy"] = run["eval_results"]["accuracy"]
        result[f"{name}_model"] = run["model"]
        result[f"{name}_dir"] = options.output_dir
    return result
