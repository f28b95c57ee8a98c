"""albert-demo: its verdict and baselines on hand-made figures, and end to end on a tiny corpus (a smoke test).

The real demo trains for minutes; the smoke test checks that every stage
runs, writes what it promises and can be re-run on the same folder.
"""

import math
import os
import random
import re
import subprocess
import sys

import pytest

import albert_tf
from albert_tf.demo import console as demo_console
from albert_tf.demo import finetuning, pretraining
from albert_tf.demo import verdict as demo
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


def _run_demo(out, corpus, *extra):
    # As a user runs it: the binary keeps TensorFlow's C++ start-up log quiet itself.
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = REPO
    return subprocess.run(
        [sys.executable, "-m", "albert_tf.bin.demo", f"--output_dir={out}", f"--input_file={corpus}",
         "--pretrain_steps=10", "--vocab_size=120", "--dupe_factor=1", "--train_batch_size=8",
         "--finetune_train_examples=48", "--finetune_dev_examples=32", "--finetune_epochs=1", *extra],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600,
    )


def test_demo_runs_every_stage_and_reruns(tmp_path):
    corpus = tmp_path / "corpus.txt"
    _corpus(str(corpus))
    out = tmp_path / "demo"
    result = _run_demo(out, corpus)
    log = result.stdout
    assert result.returncode == 0, result.stderr[-3000:]
    # The story on stdout, every line a plain line naming its stage; stderr holds no library INFO line.
    for stage in ("[1/8] corpus:", "[2/8] vocabulary:", "[3/8] pretraining data:", "[4/8] pretraining:",
                  "[5/8] evaluation:", "[6/8] fill in the blank:", "[7/8] fine-tuning:", "[8/8] export:"):
        assert stage in log
    lines = log.splitlines()
    assert all(re.match(r"(\[\d/8\] [a-z -]+: |verdict: |    |!{72}$)", line) for line in lines), lines
    assert not re.search(r"^I\d{4} [\d:.]+ +\d+ [\w.]+\.py:\d+\] ", result.stderr, re.M), result.stderr[-3000:]
    assert "oneDNN" not in result.stderr and "Sharding callback" not in result.stderr, result.stderr[-3000:]
    assert "Held-out masked-LM accuracy" in log and "Held-out sentence-order accuracy" in log
    assert "answer:" in log and "top 5:" in log
    model_dir = out / "model"
    for name in ("albert_config.json", "model.weights.safetensors", "spm.model", "eval_results.txt"):
        assert (model_dir / name).exists(), name
    # Progress: the last pretraining step, as a person reads it; fine-tuning's progress relayed.
    assert re.search(r"^\[4/8\] pretraining: step 10/10, mlm_acc \d\.\d\d, loss \d+\.\d\d, \d+\.\d steps/s, ETA ",
                     log, re.M), log[-3000:]
    assert "10 of 10 steps, done in" in log and "CUT SHORT" not in log
    assert re.search(r"^\[7/8\] fine-tuning: step 1/1 \(100%\)", log, re.M), log[-3000:]
    assert re.search(r"Fill-in-the-blank on \d+ held-out sentences .* first \d+ times .* top 5 \d+ times", log)
    # Fine-tuning: both runs evaluated on the held-out modules, beside naive Bayes and the majority class.
    match = re.search(r"from the pretrained weights +(\d\.\d+)\n.*from random weights +(\d\.\d+)\n"
                      r".*naive Bayes.* (\d\.\d+)\n.*most frequent topic '(\w+)' +(\d\.\d+)\n", log)
    assert match, log[-3000:]
    pretrained_acc, random_acc, bow, _, majority = (float(g) if i != 3 else g for i, g in enumerate(match.groups()))
    assert all(0.0 <= v <= 1.0 for v in (pretrained_acc, random_acc, bow, majority))
    # The verdict names its figures and agrees with them.
    verdict = learning_verdict_from_log(log)
    assert verdict == demo.learning_verdict(demo.DemoFigures(
        10, 10, *figures_from_log(log), pretrained_acc, random_acc, majority, bow, 32))[0]
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

    # Again on the same folder, with the library's log (--verbosity=0): nothing is made twice.
    again = _run_demo(out, corpus, "--verbosity=0")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Corpus already in" in again.stdout and "Vocabulary already at" in again.stdout
    assert "training data: 4 shard(s) already complete" in again.stdout  # the train shards are not rewritten
    assert "Fine-tuning task already in" in again.stdout
    assert again.stderr.count("Training already finished") == 2  # pretrained and random runs: the library's log
    assert again.stdout.count("Export already at") == 2
    assert "Sharding callback duration" not in again.stderr  # TensorFlow's notices need --verbosity=1


def figures_from_log(log):
    """(MLM accuracy, frequent-piece baseline, positions) as the demo printed them."""
    m = re.search(r"Held-out masked-LM accuracy (\d\.\d+) on (\d+) masked positions .*: (\d\.\d+)\)", log)
    assert m, log[-3000:]
    return float(m.group(1)), float(m.group(3)), int(m.group(2))


def learning_verdict_from_log(log):
    happened = "Learning happened:" in log
    assert happened != ("Learning did NOT clearly happen" in log), log[-3000:]
    return happened


# --------------------------------------------------------------- the verdict, on hand-made figures

GOOD = dict(pretrain_steps=1500, pretrain_steps_planned=1500, mlm_accuracy=0.16, mlm_baseline=0.06,
            mlm_positions=30000, pretrained_accuracy=0.62, random_accuracy=0.55, majority_accuracy=0.25,
            bag_of_words_accuracy=0.65, dev_examples=600)


def test_chance_margin_is_three_binomial_sigmas():
    # 3 * sqrt(0.25 * 0.75 / 600) = 3 * 0.0176777 = 0.0530330
    assert demo.chance_margin(0.25, 600) == pytest.approx(0.0530330, abs=1e-7)
    assert demo.chance_margin(0.06, 30000, sigmas=2.0) == pytest.approx(2 * math.sqrt(0.06 * 0.94 / 30000))
    with pytest.raises(ValueError, match="0"):
        demo.chance_margin(0.5, 0)


def test_verdict_passes_when_every_figure_clears_its_baseline():
    ok, lines = demo.learning_verdict(demo.DemoFigures(**GOOD))
    assert ok
    assert [line.split()[0] for line in lines[:3]] == ["PASS", "PASS", "PASS"]
    # pretrained - random = +7.0 points; 2 sigma of a difference at p = 0.585, n = 600:
    # 2 * sqrt(2 * 0.585 * 0.415 / 600) = 0.05690 -> "paid".
    assert lines[3] == ("pretraining paid: pretrained - random = +7.0 points, beyond the 2-sigma spread of a "
                        "difference (5.7)")
    assert lines[4] == "bag of words (naive Bayes) 0.650: pretrained -3.0 points, random -10.0 points"
    assert not any(line.startswith("CUT") for line in lines)


@pytest.mark.parametrize("change, failed", [
    # Majority 0.25 on 600 passages: the bar is 0.25 + 0.0530 = 0.3030.
    (dict(pretrained_accuracy=0.30), "fine-tuning from pretrained weights"),
    (dict(pretrained_accuracy=0.25), "fine-tuning from pretrained weights"),  # the collapse
    (dict(random_accuracy=0.303), "fine-tuning from random weights"),
    # Frequent piece 0.06 on 30,000 positions: bar 0.06 + 0.00411.
    (dict(mlm_accuracy=0.064), "masked LM"),
])
def test_verdict_fails_naming_the_figure_below_its_bar(change, failed):
    ok, lines = demo.learning_verdict(demo.DemoFigures(**{**GOOD, **change}))
    assert not ok
    assert [line for line in lines if line.startswith("FAIL")] == [
        line for line in lines if line.startswith(f"FAIL {failed}:")]
    assert len([line for line in lines if line.startswith("FAIL")]) == 1


def test_verdict_just_above_the_bar_passes():
    ok, _ = demo.learning_verdict(demo.DemoFigures(**{**GOOD, "pretrained_accuracy": 0.3035,
                                                      "random_accuracy": 0.3035, "mlm_accuracy": 0.0642}))
    assert ok


def test_verdict_reports_unpaid_pretraining_and_a_cut_without_failing_on_them():
    ok, lines = demo.learning_verdict(demo.DemoFigures(**{**GOOD, "pretrained_accuracy": 0.57,
                                                          "pretrain_steps": 700}))
    assert ok  # learning happened; pretraining paying is a target, not a sign of learning
    # +2.0 points; 2 sigma of a difference at p = 0.56: 2 * sqrt(2 * 0.56 * 0.44 / 600) = 5.7 points.
    assert lines[3] == ("pretraining did not clearly pay: pretrained - random = +2.0 points, within the 2-sigma "
                        "spread of a difference (5.7)")
    assert lines[-1] == "CUT pretraining stopped at 700 of 1500 steps (the --minutes safety cap)"


def test_stale_finetuning_is_removed_when_the_pretrained_model_changed(tmp_path):
    out = str(tmp_path)
    assert not finetuning.forget_stale_finetuning(out, 1)
    for folder in ("finetune/pretrained", "export/topic_classifier/1"):
        os.makedirs(os.path.join(out, folder))
    assert not finetuning.forget_stale_finetuning(out, 1)  # same model: kept
    assert os.path.isdir(os.path.join(out, "finetune", "pretrained"))
    assert finetuning.forget_stale_finetuning(out, 30)  # resumed to step 30: made again
    assert not os.path.exists(os.path.join(out, "finetune", "pretrained"))
    assert not os.path.exists(os.path.join(out, "export"))
    assert open(os.path.join(out, "finetune", "pretrain_step.txt")).read() == "30\n"


# --------------------------------------------------------------- the bag-of-words baseline

def test_naive_bayes_matches_a_hand_worked_example():
    train = ["open the file", "read the file", "close file", "send the mail", "mail server"]
    labels = ["files", "files", "files", "net", "net"]
    # Vocabulary (V = 8): open the file read close send mail server.
    # files: counts open 1, the 2, file 3, read 1, close 1 (total 8) -> P(w) = (c + 1) / 16; prior 3/5
    # net:   counts the 1, send 1, mail 2, server 1 (total 5)        -> P(w) = (c + 1) / 13; prior 2/5
    # "the mail":  files 3/5 * 3/16 * 1/16 = 0.007031; net 2/5 * 2/13 * 3/13 = 0.014201 -> net
    # "the":       files 3/5 * 3/16 = 0.1125;          net 2/5 * 2/13 = 0.0615        -> files
    # "send file": files 3/5 * 1/16 * 4/16 = 0.009375; net 2/5 * 2/13 * 1/13 = 0.004734 -> files
    # "unknown words only": no known word, the prior decides -> files
    # "MAIL, Server!": lower-cased words mail, server:
    #              files 3/5 * 1/16 * 1/16 = 0.00234;  net 2/5 * 3/13 * 2/13 = 0.0142    -> net
    dev = ["the mail", "the", "send file", "unknown words only", "MAIL, Server!"]
    assert stdlib_tasks.naive_bayes_baseline(train, labels, dev) == ["net", "files", "files", "files", "net"]
    # With alpha = 0.01, "send file": files 3/5 * 0.01/8.08 * 3.01/8.08 = 0.000277;
    # net 2/5 * 1.01/5.08 * 0.01/5.08 = 0.000157 -> still files; "the": files 0.6*2.01/8.08 = 0.149 vs
    # net 0.4*1.01/5.08 = 0.0795 -> files.
    assert stdlib_tasks.naive_bayes_baseline(train, labels, ["send file", "the"], alpha=0.01) == ["files", "files"]


def test_naive_bayes_ties_go_to_the_first_label_and_bad_inputs_fail():
    # Symmetric training data: every text scores the same for both labels.
    assert stdlib_tasks.naive_bayes_baseline(["x", "y"], ["b", "a"], ["z", "x y"]) == ["a", "a"]
    with pytest.raises(ValueError, match="-1"):
        stdlib_tasks.naive_bayes_baseline(["x"], ["a"], ["x"], alpha=-1)
    with pytest.raises(ValueError, match="1 texts and 2 labels"):
        stdlib_tasks.naive_bayes_baseline(["x"], ["a", "b"], ["x"])


def test_the_demo_package_defines_no_flags_and_its_examples_run():
    # albert_tf/demo defines no absl flags at import, so tests/test_doctests.py runs its examples
    # (the binary, albert_tf/bin/demo.py, is left out there); here: they are collected, and there are some.
    import doctest
    import importlib
    import pkgutil

    from tests import test_doctests

    names = ["albert_tf.demo"] + [info.name for info in pkgutil.walk_packages(
        [os.path.join(REPO, "albert_tf", "demo")], prefix="albert_tf.demo.")]
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, importlib; from absl import flags, logging; before = set(flags.FLAGS); "
         "[importlib.import_module(n) for n in sys.argv[1:]]; "
         "print(sorted(set(flags.FLAGS) - before), 'tensorflow' in sys.modules)", *names],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
    assert probe.stdout.strip() == "[] False", probe.stdout + probe.stderr[-2000:]  # no flags, no TensorFlow
    examples = 0
    for name in names:
        module = importlib.import_module(name)
        examples += sum(len(t.examples) for t in doctest.DocTestFinder(exclude_empty=True).find(module, name))
    assert set(names) <= set(test_doctests._module_names()) and len(names) >= 12
    assert examples >= 12


# --------------------------------------------------------------- the console

def test_console_lines_name_their_stage_and_relay_only_the_chosen_files():
    import io
    import logging as std_logging

    stream = io.StringIO()
    console = demo_console.Console(stream)
    console.stage(7, "fine-tuning", "two runs")
    with console.relaying("albert_tf/tasks/callbacks.py"):
        logger = std_logging.getLogger("absl")
        for path, level, message in [("/x/albert_tf/tasks/callbacks.py", std_logging.INFO, "step 1/2 (50%)"),
                                     ("/x/albert_tf/tasks/runner.py", std_logging.INFO, "Training csv"),
                                     ("/x/albert_tf/tasks/callbacks.py", std_logging.DEBUG, "detail")]:
            logger.handle(std_logging.LogRecord("absl", level, path, 1, message, None, None))
    logger.handle(std_logging.LogRecord("absl", std_logging.INFO, "/x/albert_tf/tasks/callbacks.py", 1,
                                        "after", None, None))
    console.warn("cut at %d of %d steps", 7, 30)
    assert stream.getvalue().splitlines() == [
        "[7/8] fine-tuning: two runs",
        "[7/8] fine-tuning: step 1/2 (50%)",
        "!" * 72, "[7/8] fine-tuning: WARNING: cut at 7 of 30 steps", "!" * 72]


def test_pretraining_progress_every_tenth_of_the_budget():
    import io

    stream = io.StringIO()
    console = demo_console.Console(stream)
    console.stage(4, "pretraining", "x")
    callback = pretraining._progress_printer(console, 1500, 64)
    for step in range(50, 1501, 50):  # run_pretraining calls it every log step (50)
        callback({"step": step, "mlm_accuracy": 0.1, "loss": 4.0, "examples_per_second": 128.0,
                  "eta_seconds": (1500 - step) / 2.0})
    steps = [int(re.search(r"step (\d+)/1500", line).group(1)) for line in stream.getvalue().splitlines()[1:]]
    assert steps == list(range(150, 1501, 150))
    assert stream.getvalue().splitlines()[-1] == (
        "[4/8] pretraining: step 1500/1500, mlm_acc 0.10, loss 4.00, 2.0 steps/s, ETA 0 s")
    # A time-budget cut (ETA 0 before the last step) is printed too.
    callback({"step": 700, "mlm_accuracy": 0.1, "loss": 4.0, "examples_per_second": 128.0, "eta_seconds": 0.0})
    assert "step 700/1500" in stream.getvalue().splitlines()[-1]
