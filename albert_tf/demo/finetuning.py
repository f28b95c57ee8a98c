"""Stage 7, fine-tuning: a labelled task built from the same machine's text (which part of the standard
library a docstring passage comes from; whole modules held out for dev), fine-tuned once from the pretrained
weights and once from random weights with the same budget, beside naive Bayes on word counts and the majority
class.

Fine-tuning has no progress hook of its own: its progress lines (albert_tf/tasks/callbacks.py) are relayed to
the story while it runs.
"""

from __future__ import annotations

import os
from typing import List, Tuple

from absl import logging

from albert_tf.demo.console import Console, format_minutes
from albert_tf.demo.settings import DemoSettings

# The library's lines shown during fine-tuning: which run starts, its step progress and dev results.
RELAYED_SOURCES = ("albert_tf/tasks/comparison.py", "albert_tf/tasks/callbacks.py")
TASK_FOLDER = "topic_task"  # under --output_dir: train.csv and dev.csv (header text,label), albert-finetune --task=csv


def task_folder(output_dir: str) -> str:
    """Where the demo writes its topic task, a ready `--data_dir` for `albert-finetune --task=csv`.

    >>> task_folder("demo_output")
    'demo_output/topic_task'
    """
    return os.path.join(output_dir, TASK_FOLDER)


def forget_stale_finetuning(out: str, pretrain_step: int) -> bool:
    """Removes fine-tuning and export outputs made from another pretraining step than `pretrain_step`.

    A demo cut short by --minutes and re-run resumes pretraining; what was
    fine-tuned and exported from the cut model must then be made again.
    Records the step in out/finetune/pretrain_step.txt.

    Returns:
        True when stale outputs were removed.

    Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> forget_stale_finetuning(d, 10), forget_stale_finetuning(d, 10), forget_stale_finetuning(d, 30)
    (False, False, True)
    """
    import tensorflow as tf

    from pipelines.fileio import atomic_write, read_text

    marker = os.path.join(out, "finetune", "pretrain_step.txt")
    stale = False
    if tf.io.gfile.exists(marker):
        previous = int(read_text(marker).strip() or -1)
        if previous != pretrain_step:
            logging.info("The pretrained model changed (step %d -> %d): fine-tuning and export again.",
                         previous, pretrain_step)
            for path in (os.path.join(out, "finetune"), os.path.join(out, "export")):
                if tf.io.gfile.exists(path):
                    tf.io.gfile.rmtree(path)
            stale = True
    tf.io.gfile.makedirs(os.path.dirname(marker))
    with atomic_write(marker) as f:
        f.write(f"{pretrain_step}\n")
    return stale


def _read_task_split(task_dir: str, split: str) -> Tuple[List[str], List[str]]:
    import csv
    import io

    from pipelines.fileio import read_text

    rows = list(csv.DictReader(io.StringIO(read_text(os.path.join(task_dir, f"{split}.csv")), newline="")))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def _write_task(settings: DemoSettings, console: Console, task_dir: str) -> None:
    import tensorflow as tf

    from pipelines.stdlib_tasks import write_stdlib_topic_task

    if tf.io.gfile.exists(os.path.join(task_dir, "dev.csv")):
        console.say("Fine-tuning task already in %s.", task_dir)
        return
    summary = write_stdlib_topic_task(task_dir, max_train_examples=settings.finetune_train_examples,
                                      max_dev_examples=settings.finetune_dev_examples, seed=settings.random_seed)
    console.say("Task: which part of the standard library wrote this docstring passage? %d training passages, "
                "%d dev passages from held-out modules; dev labels: %s", summary["train_examples"],
                summary["dev_examples"], summary["dev_labels"])


def finetuning_stage(settings: DemoSettings, console: Console, model_dir: str, precision: str,
                     pretrain_step: int) -> dict:
    """Stage 7: both fine-tuning runs (resumable) and the two baselines.

    Returns:
        compare_pretrained_vs_random's result (accuracies, majority baseline,
        models, seconds) with bag_of_words_accuracy and dev_examples.
    """
    from albert_tf.tasks.comparison import ComparisonSettings, compare_pretrained_vs_random
    from pipelines.stdlib_tasks import naive_bayes_baseline

    out = settings.output_dir
    console.stage(7, "fine-tuning", "pretrained vs random weights on a labelled task, the same budget")
    if forget_stale_finetuning(out, pretrain_step):
        console.say("The pretrained model changed: fine-tuning and export again.")
    task_dir = task_folder(out)
    _write_task(settings, console, task_dir)
    comparison = ComparisonSettings(
        max_seq_length=settings.max_seq_length, train_batch_size=settings.finetune_batch_size,
        learning_rate=settings.finetune_learning_rate, num_train_epochs=settings.finetune_epochs,
        warmup_proportion=settings.finetune_warmup_proportion, mixed_precision=precision,
        seed=settings.random_seed, pooling=settings.finetune_pooling)
    with console.relaying(*RELAYED_SOURCES):
        result = compare_pretrained_vs_random(task_dir, model_dir, os.path.join(out, "finetune"), comparison)
    train_texts, train_labels = _read_task_split(task_dir, "train")
    dev_texts, dev_labels = _read_task_split(task_dir, "dev")
    predictions = naive_bayes_baseline(train_texts, train_labels, dev_texts)
    result["bag_of_words_accuracy"] = sum(p == y for p, y in zip(predictions, dev_labels)) / len(dev_labels)
    result["dev_examples"] = len(dev_labels)
    rows = [("fine-tuned from the pretrained weights", result["pretrained_accuracy"]),
            ("fine-tuned from random weights", result["random_accuracy"]),
            ("naive Bayes on word counts (no neural network)", result["bag_of_words_accuracy"]),
            (f"always the most frequent topic {result['majority_label']!r}", result["majority_accuracy"])]
    console.say("Dev accuracy on %d passages of held-out modules (AdamW, lr %g, %g epoch(s), batch %d, %s pooling, "
                "the same for both runs):", len(dev_labels), settings.finetune_learning_rate,
                settings.finetune_epochs, settings.finetune_batch_size, settings.finetune_pooling)
    console.block(f"{name:<52} {value:.3f}" for name, value in rows)
    console.say("done in %s (pretrained %s, random %s).", format_minutes(console.elapsed()),
                format_minutes(result["pretrained_seconds"]), format_minutes(result["random_seconds"]))
    return result
