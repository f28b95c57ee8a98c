"""albert-demo end to end on a tiny corpus and a tiny time budget (a smoke test).

The real demo trains for minutes; here the point is that every stage runs,
writes what it promises and can be re-run on the same folder.
"""

import os
import random
import re
import subprocess
import sys

import albert_tf
from pipelines import stdlib_tasks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOUNS = ["parser", "socket", "module", "thread", "buffer", "string", "object", "queue", "file", "path"]
VERBS = ["returns", "reads", "writes", "closes", "opens", "creates", "checks", "holds"]
ADJS = ["new", "empty", "given", "current", "default", "open", "local", "binary"]


def _corpus(path, documents=120, seed=0):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(documents):
            for _ in range(rng.randint(3, 7)):
                words = [rng.choice(ADJS), rng.choice(NOUNS), rng.choice(VERBS), "the", rng.choice(ADJS),
                         rng.choice(NOUNS), "of", "the", rng.choice(NOUNS)]
                f.write("The " + " ".join(words) + ".\n")
            f.write("\n")


def _run_demo(out, corpus):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, "-m", "albert_tf.bin.demo", f"--output_dir={out}", f"--input_file={corpus}",
         "--minutes=0.05", "--vocab_size=120", "--dupe_factor=2", "--train_batch_size=8",
         "--finetune_train_examples=48", "--finetune_dev_examples=32", "--finetune_epochs=1"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
    )


def test_demo_runs_every_stage_and_reruns(tmp_path):
    corpus = tmp_path / "corpus.txt"
    _corpus(str(corpus))
    out = tmp_path / "demo"
    result = _run_demo(out, corpus)
    log = result.stderr
    assert result.returncode == 0, log[-3000:]
    for stage in ("1/8 corpus", "2/8 SentencePiece", "3/8 pretraining data", "4/8 pretraining",
                  "5/8 evaluation", "6/8 fill in the blank", "7/8 fine-tuning", "8/8 export"):
        assert stage in log
    assert "Held-out masked-LM accuracy" in log and "Held-out sentence-order accuracy" in log
    assert "answer:" in log and "top 5:" in log
    model_dir = out / "model"
    for name in ("albert_config.json", "model.weights.safetensors", "spm.model", "eval_results.txt"):
        assert (model_dir / name).exists(), name
    # Fine-tuning: both runs evaluated on the held-out modules, with the baseline.
    match = re.search(r"from the pretrained weights (\d\.\d+), from random weights (\d\.\d+).*"
                      r"most frequent topic '(\w+)': (\d\.\d+)", log)
    assert match, log[-3000:]
    pretrained_acc, random_acc, _, majority = (float(g) if i != 2 else g for i, g in enumerate(match.groups()))
    assert all(0.0 <= v <= 1.0 for v in (pretrained_acc, random_acc, majority))
    for name in ("pretrained", "random"):
        results = open(out / "finetune" / name / "eval_results.txt").read()
        assert f"accuracy = " in results
        classifier = albert_tf.load_task_model(str(out / "finetune" / name))
        assert set(classifier.task_config["label_names"]) <= set(stdlib_tasks.TOPIC_GROUPS)
    with open(out / "topic_task" / "train.csv", encoding="utf-8") as f:
        assert sum(1 for _ in f) == 49  # header + --finetune_train_examples
    # Export: both SavedModels exist and answered raw text.
    assert (out / "export" / "topic_classifier" / "1" / "saved_model.pb").exists()
    assert (out / "export" / "fill_mask" / "1" / "saved_model.pb").exists()
    answers = re.findall(r"classifier <- .*\n\s+-> (\w+) \(p=", log)
    assert len(answers) == 4 and set(answers) <= set(stdlib_tasks.TOPIC_GROUPS), log[-3000:]
    assert len(re.findall(r"fill-mask <- .*\n\s+-> .+ \d\.\d\d", log)) == 2, log[-3000:]
    pretrainer = albert_tf.load_checkpoint(str(model_dir))
    assert pretrainer.config.embedding_size < pretrainer.config.hidden_size
    assert pretrainer.config.sharing == "all"

    again = _run_demo(out, corpus)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Corpus already in" in again.stderr and "Vocabulary already at" in again.stderr
    assert "already complete: 4" in again.stderr  # the train shards are not rewritten
    assert "Fine-tuning task already in" in again.stderr
    assert again.stderr.count("Training already finished") == 2  # pretrained and random runs
    assert again.stderr.count("Export already at") == 2
