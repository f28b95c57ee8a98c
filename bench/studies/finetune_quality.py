r"""Does pretraining help? Fine-tunes the same classifier from pretrained and from random weights.

Study (2026-11-29). Question: Does pretraining help fine-tuning at the demo's budget? Answer: not reliably
after 152-448 pretraining steps (the masked LM is still in its unigram phase); the mean of the sequence output
probes better than [CLS] (bench/results/finetune_quality.md). Command: `python -m
bench.studies.finetune_quality --pretrained_dir=demo_output/model`.

The task is the demo's (pipelines/stdlib_tasks.py): which part of the
standard library (7 topic groups) a docstring passage comes from, with whole
modules held out for dev. Both runs get identical data, steps, learning rate,
seed and precision (albert_tf.tasks.comparison). As a diagnostic, a linear
probe (softmax regression on frozen features: the [CLS] vector, the pooled
output and the mean of the sequence output) shows what the encoder carries
before any fine-tuning.

    python -m bench.studies.finetune_quality --pretrained_dir=demo_output/model \
      --output_dir=/tmp/finetune_quality --learning_rates=5e-4,2e-4 --epochs=3

--pretrained_dir is an albert-tf model folder (albert-demo's demo_output/model
or an albert-pretrain output_dir with spm.model). Results are appended to
bench/results/finetune_quality.md with the command and the machine.
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
import time

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The study's flags, defined when it runs (not at import: a process importing several studies keeps
    one definition of each name)."""
    flags.DEFINE_string("pretrained_dir", None, "The pretrained albert-tf folder (with spm.model).", required=True)
    flags.DEFINE_string("output_dir", "/tmp/finetune_quality", "Task files and fine-tuning runs go here.")
    flags.DEFINE_integer("train_examples", None, "Training passages (default: all).")
    flags.DEFINE_integer("dev_examples", None, "Dev passages (default: all).")
    flags.DEFINE_float("epochs", 3.0, "Fine-tuning epochs (both runs).")
    flags.DEFINE_list("learning_rates", ["5e-4"], "Peak AdamW learning rates to compare at (both runs each).")
    flags.DEFINE_integer("max_seq_length", 64, "Tokens per passage.")
    flags.DEFINE_integer("train_batch_size", 32, "Fine-tuning batch.")
    flags.DEFINE_bool("probe", True, "Also run the frozen-feature linear probe.")
    flags.DEFINE_string("mixed_precision", "float32", "auto, float32 or bfloat16.")
    results = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
    flags.DEFINE_string("results_file", os.path.join(results, "finetune_quality.md"), "Markdown file the results go to.")


def softmax_regression_accuracy(x_train, y_train, x_dev, y_dev, num_classes: int, steps: int = 500,
                                learning_rate: float = 0.5, l2: float = 1e-3) -> float:
    """Dev accuracy of full-batch softmax regression on standardised features (NumPy)."""
    import numpy as np

    mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
    x_train, x_dev = (x_train - mu) / sd, (x_dev - mu) / sd
    w = np.zeros((x_train.shape[1], num_classes))
    b = np.zeros(num_classes)
    onehot = np.eye(num_classes)[y_train]
    for _ in range(steps):
        z = x_train @ w + b
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        g = (p - onehot) / len(x_train)
        w -= learning_rate * (x_train.T @ g + l2 * w)
        b -= learning_rate * g.sum(0)
    return float(((x_dev @ w + b).argmax(1) == y_dev).mean())


def frozen_features(encoder, preprocessor, texts, batch_size: int = 256) -> dict:
    """[CLS] vector, pooled output and masked mean of the sequence output, per text."""
    import numpy as np
    import tensorflow as tf

    out = {"cls": [], "pooled": [], "mean": []}
    for i in range(0, len(texts), batch_size):
        features = preprocessor(tf.constant(texts[i:i + batch_size]))
        outputs = encoder(features)
        mask = tf.cast(features["input_mask"], tf.float32)[..., None]
        out["cls"].append(outputs["sequence_output"][:, 0].numpy())
        out["pooled"].append(outputs["pooled_output"].numpy())
        out["mean"].append((tf.reduce_sum(outputs["sequence_output"] * mask, 1) / tf.reduce_sum(mask, 1)).numpy())
    return {k: np.concatenate(v).astype("float64") for k, v in out.items()}


def probe(pretrained_dir: str, task_dir: str, max_seq_length: int) -> dict:
    """Linear-probe dev accuracy of each frozen feature, pretrained vs random encoder."""
    import csv

    import numpy as np

    import albert_tf
    from albert_tf.layers.preprocessor import AlbertTextPreprocessor

    def split(name):
        with open(os.path.join(task_dir, f"{name}.csv"), encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        return [r["text"] for r in rows], [r["label"] for r in rows]

    (x_train, y_train), (x_dev, y_dev) = split("train"), split("dev")
    names = sorted(set(y_train))
    y_train = np.array([names.index(y) for y in y_train])
    y_dev = np.array([names.index(y) for y in y_dev])
    preprocessor = AlbertTextPreprocessor(os.path.join(pretrained_dir, "spm.model"), max_seq_length=max_seq_length)
    config = albert_tf.AlbertConfig.from_json_file(os.path.join(pretrained_dir, "albert_config.json"))
    results = {}
    for name, encoder in (("pretrained", albert_tf.load_checkpoint(pretrained_dir).encoder),
                          ("random", albert_tf.AlbertEncoder(config))):
        train, dev = frozen_features(encoder, preprocessor, x_train), frozen_features(encoder, preprocessor, x_dev)
        for key in train:
            results[f"{name}_{key}"] = softmax_regression_accuracy(train[key], y_train, dev[key], y_dev, len(names))
            logging.info("Probe %s %s: %.3f", name, key, results[f"{name}_{key}"])
    return results


def _pretraining_summary(pretrained_dir: str) -> str:
    path = os.path.join(pretrained_dir, "eval_results.txt")
    if not os.path.exists(path):
        return "no eval_results.txt"
    with open(path, encoding="utf-8") as f:
        return ", ".join(line.strip() for line in f if line.strip())


def main(argv):
    del argv
    from albert_tf.tasks.comparison import ComparisonSettings, compare_pretrained_vs_random
    from pipelines.stdlib_tasks import write_stdlib_topic_task

    started = time.time()
    task_dir = os.path.join(FLAGS.output_dir, "topic_task")
    summary = write_stdlib_topic_task(task_dir, max_train_examples=FLAGS.train_examples,
                                      max_dev_examples=FLAGS.dev_examples)
    rows = []
    for rate in FLAGS.learning_rates:
        settings = ComparisonSettings(max_seq_length=FLAGS.max_seq_length, train_batch_size=FLAGS.train_batch_size,
                                      learning_rate=float(rate), num_train_epochs=FLAGS.epochs,
                                      mixed_precision=FLAGS.mixed_precision)
        result = compare_pretrained_vs_random(task_dir, FLAGS.pretrained_dir,
                                              os.path.join(FLAGS.output_dir, f"lr_{rate}"), settings)
        rows.append((rate, result))
        logging.info("lr %s: pretrained %.3f, random %.3f, majority %.3f", rate, result["pretrained_accuracy"],
                     result["random_accuracy"], result["majority_accuracy"])
    probes = probe(FLAGS.pretrained_dir, task_dir, FLAGS.max_seq_length) if FLAGS.probe else {}

    lines = [
        f"\n## {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPU cores, "
        f"{platform.machine()}, load average {os.getloadavg()[0]:.1f} at the end\n",
        "```\npython " + " ".join(sys.argv) + "\n```\n",
        f"Pretrained model: `{FLAGS.pretrained_dir}` ({_pretraining_summary(FLAGS.pretrained_dir)}).",
        f"Task: {summary['train_examples']} training / {summary['dev_examples']} dev passages "
        f"(dev = held-out modules), 7 topics; {FLAGS.epochs:g} epoch(s), batch {FLAGS.train_batch_size}, "
        f"max_seq_length {FLAGS.max_seq_length}, {FLAGS.mixed_precision}.\n",
        "| learning rate | pretrained dev acc | random dev acc | majority class | pretrained s | random s |",
        "|---|---|---|---|---|---|",
    ]
    for rate, r in rows:
        lines.append(f"| {rate} | {r['pretrained_accuracy']:.3f} | {r['random_accuracy']:.3f} | "
                     f"{r['majority_accuracy']:.3f} ({r['majority_label']}) | {r['pretrained_seconds']:.0f} | "
                     f"{r['random_seconds']:.0f} |")
    if probes:
        lines += ["", "Linear probe on frozen features (softmax regression, dev accuracy):", "",
                  "| encoder | [CLS] vector | pooled output | mean of sequence output |", "|---|---|---|---|"]
        for name in ("pretrained", "random"):
            lines.append(f"| {name} | {probes[f'{name}_cls']:.3f} | {probes[f'{name}_pooled']:.3f} | "
                         f"{probes[f'{name}_mean']:.3f} |")
    lines.append(f"\nTotal {time.time() - started:.0f} s (wall clock; the machine may be shared).\n")
    os.makedirs(os.path.dirname(FLAGS.results_file), exist_ok=True)
    with open(FLAGS.results_file, "a", encoding="utf-8") as f:
        f.write("\n".join(lines))
    logging.info("Results appended to %s", FLAGS.results_file)


if __name__ == "__main__":
    define_flags()
    app.run(main)
