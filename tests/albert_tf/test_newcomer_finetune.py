"""README.md's fine-tuning command, as written, learns on a model of the demo's size (issue 35).

The command (`albert-finetune --task=csv --data_dir=mytask --init_checkpoint=demo_output/model
--output_dir=runs/mytask --do_train --do_eval`) runs through the installed binary in a folder laid out as the
README's user has it after `albert-demo`: `demo_output/model` holds a model of the demo's config
(`albert_tf.demo.pretraining.demo_config`: E=64, H=128, 4 all-shared layers, 64 positions; randomly
initialised, and with a vocabulary of the task's own text instead of the demo's 6,000 pieces), `mytask/` a
`text,label` table. The only flag added is `--seed`. Before size-based defaults (albert_tf/finetune_defaults.py)
the command used ALBERT-base's recipe (lr 3e-5, pooled head, batch 32, 3 epochs), which on this model and task
stays at the class prior: dev accuracy 0.444, the majority share exactly, against 0.831 with the small model's
defaults (seed 1, float32, measured while writing this test; the bound below is 0.640).

The task: which of four topics a sentence is about, each topic with six made-up keywords, two of them in every
sentence among six to ten shared filler words; the topics are drawn with probabilities 0.4, 0.3, 0.2 and 0.1,
so that a model predicting the prior scores about 0.4 and only a model that reads the keywords does better.
"""

import csv
import json
import math
import os
import random
import shutil
import subprocess
import sys

import pytest

from tests.shared_work import build_once

README_COMMAND = ("albert-finetune --task=csv --data_dir=mytask --init_checkpoint=demo_output/model "
                  "--output_dir=runs/mytask --do_train --do_eval")
# docs/finetuning.md's command: the same run, predicting the test split too (a rerun of a finished run).
DOCS_COMMAND = README_COMMAND + " --do_predict"
TOPICS = {"files": 0.4, "networking": 0.3, "maths": 0.2, "text": 0.1}
TRAIN_ROWS, DEV_ROWS = 320, 160
SIGMAS = 5.0  # a model no better than the majority class beats majority + 5 sigmas with probability < 3e-7


def _made_up_words(rng: random.Random, count: int, taken: set) -> list:
    words = []
    while len(words) < count:
        word = "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 3)))
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


def write_topic_task(folder: str, seed: int = 0) -> None:
    """mytask/{train,dev}.csv: `text,label` rows of the four-topic keyword task (module docstring)."""
    rng = random.Random(seed)
    taken: set = set()
    keywords = {topic: _made_up_words(rng, 6, taken) for topic in TOPICS}
    filler = _made_up_words(rng, 60, taken)
    os.makedirs(folder, exist_ok=True)
    for split, rows in (("train", TRAIN_ROWS), ("dev", DEV_ROWS)):
        with open(os.path.join(folder, f"{split}.csv"), "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            for _ in range(rows):
                topic = rng.choices(list(TOPICS), weights=list(TOPICS.values()))[0]
                words = rng.sample(filler, rng.randint(6, 10)) + [rng.choice(keywords[topic]) for _ in range(2)]
                rng.shuffle(words)
                writer.writerow([" ".join(words), topic])
    with open(os.path.join(folder, "test.csv"), "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["text"], [" ".join(keywords["maths"][:2])], [" ".join(keywords["files"][:2])]])


def _build(folder: str) -> None:
    """mytask/ and demo_output/model (a demo-config model with a vocabulary of the task's text)."""
    import keras

    import albert_tf
    import pipelines
    from albert_tf.demo.pretraining import demo_config
    from pipelines import tokenizer

    write_topic_task(os.path.join(folder, "mytask"))
    with open(os.path.join(folder, "mytask", "train.csv"), encoding="utf-8", newline="") as f:
        texts = [row["text"] for row in csv.DictReader(f)]
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.writelines(text + "\n" for text in texts)
    spm = tokenizer.train_sentencepiece([corpus], os.path.join(folder, "sp"), vocab_size=300, seed=1,
                                        extra_options={"hard_vocab_limit": False})
    keras.utils.set_random_seed(1)
    config = demo_config(pipelines.SentencePieceVocab.from_file(spm).vocab_size, 64)
    albert_tf.save_pretrained(albert_tf.AlbertPretrainer(config), os.path.join(folder, "demo_output", "model"),
                              spm_model_file=spm)


def _albert_finetune(command: str, cwd) -> subprocess.CompletedProcess:
    binary = os.path.join(os.path.dirname(sys.executable), "albert-finetune")
    argv = [binary, *command.split()[1:], "--seed=1"]
    return subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, timeout=300)


def _majority_share(path: str) -> float:
    with open(path, encoding="utf-8", newline="") as f:
        labels = [row["label"] for row in csv.DictReader(f)]
    return max(labels.count(label) for label in set(labels)) / len(labels)


def test_readme_command_learns_on_a_demo_sized_model(tmp_path_factory, tmp_path):
    from albert_tf.demo.pretraining import demo_config
    from albert_tf.finetune_defaults import SMALL_MODEL_DEFAULTS
    from albert_tf.tasks.runner import read_eval_results

    built = build_once(tmp_path_factory, "newcomer-demo-sized-model", _build)
    for name in ("mytask", "demo_output"):
        shutil.copytree(os.path.join(built, name), os.path.join(tmp_path, name))
    with open(tmp_path / "demo_output" / "model" / "albert_config.json", encoding="utf-8") as f:
        config = json.load(f)
    demo = demo_config(config["vocab_size"], 64).to_dict()
    assert {k: v for k, v in config.items() if k in demo} == demo  # the demo's shape, 64 positions

    run = _albert_finetune(README_COMMAND, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    said = [line for line in run.stderr.splitlines() if "Small model (hidden size 128 <= 256)" in line]
    assert len(said) == 1, run.stderr[-3000:]
    assert ("--pooling=mean --learning_rate=0.0005 --train_batch_size=16 --num_train_epochs=5, the values of "
            "flags/recipes/small_finetune.cfg for the flags not given") in said[0]
    results = read_eval_results(str(tmp_path / "runs" / "mytask" / "eval_results.txt"))
    assert results["num_examples"] == DEV_ROWS
    majority = _majority_share(str(tmp_path / "mytask" / "dev.csv"))
    assert 0.3 < majority < 0.5  # the 0.4 topic, drawn
    bound = majority + SIGMAS * math.sqrt(majority * (1 - majority) / DEV_ROWS)
    assert results["accuracy"] > bound, (results, majority, bound)
    assert results["eval_loss"] < math.log(len(TOPICS))  # below a uniform guess's loss

    # The resolved values are the run's settings, and the model has the small recipe's head.
    with open(tmp_path / "runs" / "mytask" / "finetune_run.json", encoding="utf-8") as f:
        settings = json.load(f)
    for name in ("learning_rate", "train_batch_size", "pooling", "optimizer"):
        assert settings[name] == SMALL_MODEL_DEFAULTS[name], name
    assert settings["total_steps"] == int(TRAIN_ROWS / 16 * 5)
    with open(tmp_path / "runs" / "mytask" / "task_config.json", encoding="utf-8") as f:
        assert json.load(f)["pooling"] == "mean"

    # docs/finetuning.md's command on the same folder resolves the same settings: the finished run is taken
    # (not refused as "other settings"), evaluated again and its test split predicted.
    again = _albert_finetune(DOCS_COMMAND, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Training already finished" in again.stderr
    assert read_eval_results(str(tmp_path / "runs" / "mytask" / "eval_results.txt")) == pytest.approx(results)
    with open(tmp_path / "runs" / "mytask" / "submit_results.tsv", encoding="utf-8") as f:
        assert [line.split("\t")[1] for line in f.read().splitlines()[1:]] == ["maths", "files"]
