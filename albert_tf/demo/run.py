"""The demo's eight stages in order (`run_demo`), each skipped when its output is already complete.

Example:

>>> from albert_tf.demo import DemoSettings, run_demo
>>> learned = run_demo(DemoSettings(output_dir="demo_output", pretrain_steps=300))  # doctest: +SKIP
"""

from __future__ import annotations

import time
from typing import Optional

from albert_tf.demo.blanks import fill_in_the_blank_stage
from albert_tf.demo.console import Console, format_minutes
from albert_tf.demo.corpus import corpus_stage
from albert_tf.demo.data import data_stage
from albert_tf.demo.evaluation import evaluation_stage
from albert_tf.demo.export import export_stage
from albert_tf.demo.finetuning import finetuning_stage, task_folder
from albert_tf.demo.pretraining import pretraining_stage
from albert_tf.demo.settings import DemoSettings
from albert_tf.demo.verdict import DemoFigures, report_verdict
from albert_tf.demo.vocabulary import vocabulary_stage

VERDICT_KEYS = ("pretrained_accuracy", "random_accuracy", "majority_accuracy", "bag_of_words_accuracy",
                "dev_examples")


def run_demo(settings: DemoSettings, console: Optional[Console] = None) -> bool:
    """Runs (or continues) the demo under settings.output_dir.

    Args:
        settings: the demo's settings (albert-demo's flags).
        console: where the story goes (default: stdout).

    Returns:
        Whether learning happened (the verdict).
    """
    console = console or Console()
    start = time.time()
    from pipelines.fileio import is_url, makedirs

    out = settings.output_dir
    if is_url(out):
        # SentencePiece's trainer (stage 2) writes local files only; the corpus (--input_file) may be a URL.
        raise ValueError(f"--output_dir={out!r}: the demo needs a local folder (its SentencePiece model is "
                         "trained into it); copy the folder to your bucket afterwards.")
    makedirs(out)

    train_txt, eval_txt = corpus_stage(settings, console)
    spm_model, vocab_size = vocabulary_stage(settings, console, train_txt)
    train_pattern, eval_pattern = data_stage(settings, console, train_txt, eval_txt, spm_model)
    result, model_dir, precision = pretraining_stage(settings, console, vocab_size, spm_model, train_pattern,
                                                     eval_pattern)
    mlm = evaluation_stage(settings, console, result, vocab_size, spm_model, train_pattern, eval_pattern)
    fill_in_the_blank_stage(settings, console, result["model"], spm_model, eval_txt)
    pretrain_step = int(result["global_step"])
    finetuned = finetuning_stage(settings, console, model_dir, precision, pretrain_step)
    export_stage(settings, console, finetuned["pretrained_model"], result["model"], spm_model,
                 task_folder(out))

    console.stage(None, "verdict", "the demo took %s. Model, config and vocabulary: %s (load with "
                  "albert_tf.load_checkpoint(%r))." % (format_minutes(time.time() - start), model_dir, model_dir))
    figures = DemoFigures(pretrain_steps=pretrain_step, pretrain_steps_planned=settings.pretrain_steps, **mlm,
                          **{k: finetuned[k] for k in VERDICT_KEYS})
    return report_verdict(console, figures)
