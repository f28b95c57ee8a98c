"""The demo's topic task is a ready `--data_dir`: README's fine-tuning command with the `--data_dir` it suggests
(`demo_output/topic_task`) runs on it.

albert-demo leaves `demo_output/topic_task/{train,dev}.csv` (header `text,label`, written by
`pipelines.stdlib_tasks.write_stdlib_topic_task`, which the demo calls) and `demo_output/model`. Here both are
made small (fewer passages; a tiny model with random weights, as the plumbing needs no learning) and the command
runs through the installed albert-finetune with its own defaults (no flag added).
"""

import csv
import json
import os
import shlex
import subprocess
import sys

import albert_tf
from albert_tf.demo.finetuning import task_folder
from albert_tf.tasks.runner import read_eval_results
from pipelines.stdlib_tasks import write_stdlib_topic_task
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

README_COMMAND = ("albert-finetune --task=csv --data_dir=demo_output/topic_task --init_checkpoint=demo_output/model "
                  "--output_dir=runs/topic --do_train --do_eval")


def test_readme_command_fine_tunes_on_the_demo_task(tmp_path):
    assert task_folder("demo_output") == os.path.join("demo_output", "topic_task")
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "README.md"), encoding="utf-8") as f:
        assert f"--data_dir={task_folder('demo_output')}" in f.read()  # the folder the README suggests
    (tmp_path / "spm").mkdir()
    albert_tf.save_pretrained(albert_tf.AlbertPretrainer(tiny_config()), str(tmp_path / "demo_output" / "model"),
                              spm_model_file=train_tiny_spm(str(tmp_path / "spm")))
    task = task_folder(str(tmp_path / "demo_output"))
    summary = write_stdlib_topic_task(task, max_train_examples=48, max_dev_examples=21, seed=12345)
    for split in ("train", "dev"):
        with open(os.path.join(task, f"{split}.csv"), encoding="utf-8", newline="") as f:
            assert next(csv.reader(f)) == ["text", "label"]  # the layout the README tells users to copy

    argv = shlex.split(README_COMMAND)
    argv[0] = os.path.join(os.path.dirname(sys.executable), argv[0])
    done = subprocess.run(argv, cwd=str(tmp_path), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = tmp_path / "runs" / "topic"
    results = read_eval_results(str(out / "eval_results.txt"))
    assert results["num_examples"] == summary["dev_examples"] == 21 and 0.0 <= results["accuracy"] <= 1.0
    with open(out / "task_config.json", encoding="utf-8") as f:
        assert json.load(f)["label_names"] == sorted(summary["train_labels"])  # the 7 parts of the library
