r"""The small-model fine-tuning recipe (flags/recipes/small_finetune.cfg) and the pooling choice, measured.

Study (2026-12-01). Question: Which fine-tuning recipe and pooling learn best for the small model from random
weights? Answer: mean pooling, AdamW 5e-4, batch 16, 5 epochs (0.651 on the topic task against 0.436 with the
pooled [CLS]), the recipe of flags/recipes/small_finetune.cfg (bench/results/finetune_small_recipe.md).
Command: `python -m bench.studies.finetune_small_recipe --output_dir=/tmp/recipe --tasks=topic`.

Fine-tunes the demo's model shape (all-shared ALBERT, E=64, H=128, L=4, 2 heads,
FFN 512) from random weights with albert-finetune's own driver
(`albert_tf.tasks.runner.run_finetuning`: bias-corrected AdamW by default,
linear warmup and decay, length buckets) over a grid of learning rate, warmup
share, epochs, batch size, optimizer and pooling, each with several seeds,
and appends a table of dev accuracy (mean and spread over seeds) to
--results_file. Random weights, so that the recipe does not depend on how long
something was pretrained; steps-based, so the figures do not depend on the
machine's load (the seconds do).

Tasks, built from text on the machine (SentencePiece model trained on the
standard library's docstrings, --vocab_size pieces):

* topic: the demo's task (`pipelines.stdlib_tasks`): which of 7 parts of the
  standard library a docstring passage comes from; dev = held-out modules;
* same_doc: sentence pairs (`pipelines.machine_tasks.same_document_pairs`):
  are A and B from the same module? dev = held-out modules.

    python -m bench.studies.finetune_small_recipe --output_dir=/tmp/recipe \
      --tasks=topic --learning_rates=5e-4,1e-3 --poolings=pooled,mean --seeds=1,2 \
      --results_file=bench/results/finetune_small_recipe.md
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from typing import Dict, List

from absl import app, flags, logging

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The study's flags, defined when it runs (not at import: a process importing several studies keeps
    one definition of each name)."""
    flags.DEFINE_string("output_dir", None, "Work folder (tasks, vocabulary, runs).", required=True)
    flags.DEFINE_list("tasks", ["topic"], "topic and/or same_doc.")
    flags.DEFINE_list("learning_rates", ["5e-4"], "Peak learning rates.")
    flags.DEFINE_list("warmups", ["0.1"], "Warmup proportions.")
    flags.DEFINE_list("epochs", ["3"], "Epoch counts.")
    flags.DEFINE_list("batch_sizes", ["32"], "Training batch sizes.")
    flags.DEFINE_list("optimizers", ["adamw"], "adamw and/or adamw_original.")
    flags.DEFINE_list("poolings", ["pooled"], "pooled and/or mean.")
    flags.DEFINE_list("seeds", ["1", "2"], "Seeds of the head, dropout and data order.")
    flags.DEFINE_integer("train_examples", 3000, "Training examples per task (seeded subset).")
    flags.DEFINE_integer("dev_examples", 600, "Dev examples per task (seeded subset).")
    flags.DEFINE_integer("max_seq_length", 64, "Tokens per input.")
    flags.DEFINE_integer("vocab_size", 6000, "SentencePiece pieces (an upper bound, as the demo's).")
    flags.DEFINE_float("dropout", 0.1, "Hidden and attention dropout of the model (the paper's fine-tuning 0.1).")
    flags.DEFINE_string("results_file", None, "Markdown file the table is appended to.")


def small_config(vocab_size: int, dropout: float):
    """The demo's model shape (`albert_tf.demo.pretraining.demo_config`) with fine-tuning dropout."""
    import albert_tf

    return albert_tf.AlbertConfig(vocab_size=vocab_size, embedding_size=64, hidden_size=128, num_hidden_layers=4,
                                  num_attention_heads=2, intermediate_size=512, hidden_dropout_prob=dropout,
                                  attention_probs_dropout_prob=dropout, max_position_embeddings=64)


def _prepare(out: str) -> Dict[str, object]:
    """The SentencePiece model and the task folders (made once, reused)."""
    import pipelines
    from pipelines.stdlib_corpus import iter_stdlib_documents, write_stdlib_corpus
    from pipelines.stdlib_tasks import write_stdlib_topic_task

    spm_model = os.path.join(out, "spm.model")
    if not os.path.exists(spm_model):
        corpus = write_stdlib_corpus(os.path.join(out, "corpus"), seed=1)
        pipelines.train_sentencepiece([corpus["train_file"]], os.path.join(out, "spm"), vocab_size=FLAGS.vocab_size,
                                      seed=1, extra_options={"hard_vocab_limit": False})
    vocab_size = pipelines.SentencePieceVocab.from_file(spm_model).vocab_size
    tasks = {}
    if "topic" in FLAGS.tasks:
        folder = os.path.join(out, "topic")
        if not os.path.exists(os.path.join(folder, "dev.csv")):
            write_stdlib_topic_task(folder, max_train_examples=FLAGS.train_examples,
                                    max_dev_examples=FLAGS.dev_examples)
        tasks["topic"] = {"data_dir": folder, "text_b_column": None}
    if "same_doc" in FLAGS.tasks:
        from pipelines import machine_tasks

        folder = os.path.join(out, "same_doc")
        if not os.path.exists(os.path.join(folder, "dev.jsonl")):
            examples = machine_tasks.same_document_pairs(iter_stdlib_documents(), seed=1,
                                                         max_train_examples=FLAGS.train_examples,
                                                         max_dev_examples=FLAGS.dev_examples)
            machine_tasks.write_task(folder, examples)
        tasks["same_doc"] = {"data_dir": folder, "text_b_column": "text_b"}
    return {"spm_model": spm_model, "vocab_size": vocab_size, "tasks": tasks}


def _run_one(prep, task: str, setting: Dict[str, str], seed: int, out: str) -> Dict[str, float]:
    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.runner import FinetuneOptions, run_finetuning

    name = "_".join(f"{k}{v}" for k, v in setting.items())
    options = FinetuneOptions(
        task="csv", data_dir=prep["tasks"][task]["data_dir"], output_dir=os.path.join(out, task, name, f"s{seed}"),
        config=small_config(prep["vocab_size"], FLAGS.dropout),
        task_options=TaskOptions(max_seq_length=FLAGS.max_seq_length, spm_model_file=prep["spm_model"],
                                 text_b_column=prep["tasks"][task]["text_b_column"], pooling=setting["pooling"]),
        train_batch_size=int(setting["batch"]), eval_batch_size=128, learning_rate=float(setting["lr"]),
        num_train_epochs=float(setting["epochs"]), warmup_proportion=float(setting["warmup"]),
        optimizer=setting["opt"], mixed_precision="float32", do_train=True, do_eval=True, seed=seed,
        log_steps=1000)
    started = time.time()
    result = run_finetuning(options)
    return {"accuracy": float(result["eval_results"]["accuracy"]), "seconds": time.time() - started}


def _table(rows: List[dict]) -> str:
    lines = ["| task | optimizer | pooling | lr | warmup | epochs | batch | dev accuracy per seed | mean | spread "
             "(max-min) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        accs = r["accuracies"]
        lines.append(f"| {r['task']} | {r['opt']} | {r['pooling']} | {r['lr']} | {r['warmup']} | {r['epochs']} | "
                     f"{r['batch']} | {', '.join(f'{a:.3f}' for a in accs)} | **{statistics.mean(accs):.3f}** | "
                     f"{max(accs) - min(accs):.3f} |")
    return "\n".join(lines)


def main(argv) -> None:
    del argv
    import sys

    out = FLAGS.output_dir
    os.makedirs(out, exist_ok=True)
    prep = _prepare(out)
    rows = []
    grid = itertools.product(FLAGS.tasks, FLAGS.optimizers, FLAGS.poolings, FLAGS.learning_rates, FLAGS.warmups,
                             FLAGS.epochs, FLAGS.batch_sizes)
    started = time.time()
    for task, opt, pooling, lr, warmup, epochs, batch in grid:
        setting = {"opt": opt, "pooling": pooling, "lr": lr, "warmup": warmup, "epochs": epochs, "batch": batch}
        runs = [_run_one(prep, task, setting, int(seed), out) for seed in FLAGS.seeds]
        rows.append({"task": task, **setting, "accuracies": [r["accuracy"] for r in runs]})
        logging.info("%s %s: %s (%.0f s)", task, setting, rows[-1]["accuracies"], sum(r["seconds"] for r in runs))
    load = os.getloadavg()[0]
    text = (f"\n## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPU cores, load average "
            f"{load:.1f} at the end, {time.time() - started:.0f} s wall clock\n\n```\npython -m bench.studies.finetune_small_recipe "
            + " ".join(a for a in sys.argv[1:] if not a.startswith(("--output_dir", "--results_file")))
            + f"\n```\n\nRandom init, {FLAGS.train_examples} training / {FLAGS.dev_examples} dev examples per task, "
            f"max_seq_length {FLAGS.max_seq_length}, vocabulary {prep['vocab_size']} pieces, dropout {FLAGS.dropout}, "
            "float32.\n\n" + _table(rows) + "\n")
    print(text)
    if FLAGS.results_file:
        with open(FLAGS.results_file, "a", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    define_flags()
    app.run(main)
