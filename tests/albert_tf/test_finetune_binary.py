"""albert-finetune end to end on tiny hand-made data for every task type.

The binary's `main` runs in this process (flags parsed by absl as on the
command line) to save TensorFlow start-up time; one test runs the installed
console script. Each run trains a 2-layer, hidden-16 ALBERT for one short
epoch: the point is the plumbing (files, keys, ranges, reload, resume,
errors), not accuracy (bench/studies/finetune_quality.py measures learning).
"""

import csv
import importlib
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from absl import flags

import albert_tf
from albert_tf import metrics
from albert_tf.bin import finetune
from albert_tf.tasks import callbacks as cb
from albert_tf.tasks import get_task
from albert_tf.tasks.runner import read_eval_results
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm
from tests.albert_tf.tasks import finetune_data

FLAGS = flags.FLAGS


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("finetune_assets"))
    spm = train_tiny_spm(folder)
    config_file = os.path.join(folder, "albert_config.json")
    tiny_config().to_json_file(config_file)
    # A "pretrained" folder as albert-pretrain writes it (random weights suffice here).
    pretrained = os.path.join(folder, "pretrained")
    albert_tf.save_pretrained(albert_tf.AlbertPretrainer(tiny_config()), pretrained, spm_model_file=spm)
    return {"spm": spm, "config": config_file, "pretrained": pretrained, "folder": folder}


def _argv(task, data_dir, output_dir, assets, *extra, init="config"):
    weights = (f"--albert_config_file={assets['config']}" if init == "config"
               else f"--init_checkpoint={assets['pretrained']}")
    # Every flag is explicit: another binary's test in this process may have
    # defined a shared flag first with its own default.
    return [f"--task={task}", f"--data_dir={data_dir}", f"--output_dir={output_dir}", weights,
            f"--spm_model_file={assets['spm']}", "--max_seq_length=32", "--train_batch_size=4",
            "--eval_batch_size=8", "--learning_rate=1e-3", "--num_train_epochs=1", "--warmup_proportion=0.1",
            "--strategy=default", "--mixed_precision=float32", "--seed=1", "--log_steps=1",
            "--max_query_length=8", "--doc_stride=8", "--max_qa_length=16", "--do_train", "--do_eval",
            "--do_predict", "--optimizer=adamw", "--pooling=pooled", "--save_checkpoints_steps=1000", *extra]


def _run(argv):
    finetune._define_flags()
    FLAGS.unparse_flags()
    FLAGS(["albert-finetune"] + list(argv))
    try:
        return finetune.main(["albert-finetune"])
    finally:
        FLAGS.unparse_flags()


def _read_tsv(path):
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t"))


def _check_model_folder(output_dir, task_type):
    for name in ("albert_config.json", "model.weights.safetensors", "task_config.json", "spm.model"):
        assert os.path.exists(os.path.join(output_dir, name)), name
    with open(os.path.join(output_dir, "task_config.json")) as f:
        assert json.load(f)["task_type"] == task_type
    # The pretrainer/encoder weights load from the same folder.
    assert albert_tf.load_checkpoint(output_dir).config.hidden_size == 16


def _check_reload_reproduces_eval(task_name, data_dir, output_dir, results, assets, **task_kwargs):
    """The saved model, reloaded, gives the dev numbers eval_results.txt holds."""
    from albert_tf.tasks.base import TaskOptions

    options = TaskOptions(max_seq_length=32, spm_model_file=assets["spm"], max_query_length=8, doc_stride=8,
                          max_qa_length=16, **task_kwargs)
    task = get_task(task_name, options)
    if task_name == "csv":
        task.read(data_dir, "train")
    model = albert_tf.load_task_model(output_dir)
    again = task.evaluate(model, task.read(data_dir, "dev"), 8)
    for key, value in results.items():
        assert again[key] == pytest.approx(value, abs=1e-6), key


def test_glue_sst2_from_a_pretrained_folder(tmp_path, assets):
    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"))
    out = str(tmp_path / "out")
    _run(_argv("glue/sst-2", data, out, assets, init="pretrained"))
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert set(results) == {"accuracy", "eval_loss", "num_examples"}
    assert 0.0 <= results["accuracy"] <= 1.0 and results["num_examples"] == 6
    # Cross-entropy of a near-uniform 2-class model stays near log 2.
    assert 0.0 < results["eval_loss"] < 3.0
    probabilities = np.array(_read_tsv(os.path.join(out, "test_results.tsv")), float)
    assert probabilities.shape == (4, 2)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    submit = _read_tsv(os.path.join(out, "submit_results.tsv"))
    assert submit[0] == ["index", "prediction"]
    assert [row[0] for row in submit[1:]] == ["0", "1", "2", "3"]
    assert all(row[1] in ("0", "1") and row[1] == str(int(np.argmax(p)))
               for row, p in zip(submit[1:], probabilities))
    _check_model_folder(out, "classification")
    assert albert_tf.load_task_model(out).task_config["label_names"] == ["0", "1"]
    _check_reload_reproduces_eval("glue/sst-2", data, out, results, assets)
    # TensorBoard scalars were written for training and dev.
    assert any(n.startswith("events") for n in os.listdir(os.path.join(out, "train")))
    assert any(n.startswith("events") for n in os.listdir(os.path.join(out, "eval")))


def test_csv_sentence_pairs_with_string_labels(tmp_path, assets):
    data = finetune_data.csv_pairs(str(tmp_path / "pairs"))
    out = str(tmp_path / "out")
    _run(_argv("csv", data, out, assets, "--text_b_column=text_b"))
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert 0.0 <= results["accuracy"] <= 1.0 and results["num_examples"] == 6
    submit = _read_tsv(os.path.join(out, "submit_results.tsv"))[1:]
    assert len(submit) == 3 and {row[1] for row in submit} <= {"different", "same"}
    with open(os.path.join(out, "task_config.json")) as f:
        assert json.load(f)["label_names"] == ["different", "same"]  # learned from train, sorted
    _check_reload_reproduces_eval("csv", data, out, results, assets, text_b_column="text_b")


@pytest.mark.parametrize("version", ["squad_v1", "squad_v2"])
def test_squad(tmp_path, assets, version):
    data = finetune_data.squad(str(tmp_path / "squad"), version_2=version == "squad_v2")
    out = str(tmp_path / "out")
    _run(_argv(version, data, out, assets, "--n_best_size=5", "--max_answer_length=4"))
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    if version == "squad_v1":
        assert set(results) == {"exact_match", "f1", "total"}
        assert results["total"] == 3
    else:
        assert {"exact", "f1", "total", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(results)
        assert results["total"] == 6
        # Scored at the threshold searched on dev (the original run_squad_v2), which
        # the saved model records for prediction and export (see the checks of
        # predictions.json below; tests/albert_tf/tasks/test_span_qa.py has a hand-worked case).
        threshold = results["null_score_diff_threshold"]
        assert threshold == results["best_f1_thresh"]
        with open(os.path.join(out, "task_config.json")) as f:
            assert json.load(f)["null_score_diff_threshold"] == pytest.approx(threshold, abs=1e-6)
    assert 0.0 <= results["f1"] <= 100.0
    with open(os.path.join(out, "predictions.json")) as f:
        predictions = json.load(f)
    questions = 3 if version == "squad_v1" else 6
    assert len(predictions) == questions and all(isinstance(v, str) for v in predictions.values())
    with open(os.path.join(data, "dev.json")) as f:
        contexts = [p["context"] for a in json.load(f)["data"] for p in a["paragraphs"]]
    # Every answer is a substring of its (original) context, or "" for no answer.
    assert all(answer == "" or any(answer in c for c in contexts) for answer in predictions.values())
    assert os.path.exists(os.path.join(out, "null_odds.json")) == (version == "squad_v2")
    if version == "squad_v2":  # predictions.json (dev: no test file) answers at that threshold
        with open(os.path.join(out, "null_odds.json")) as f:
            odds = json.load(f)
        with open(os.path.join(out, "nbest_predictions.json")) as f:
            nbest = json.load(f)
        best = {q: next((e["text"] for e in entries if e["text"]), "") for q, entries in nbest.items()}
        assert predictions == {q: "" if odds[q] > threshold else best[q] for q in best}
        with open(os.path.join(data, "dev.json")) as f:
            gold = metrics.gold_answers_from_squad(json.load(f))
        rescored = metrics.squad_v2_scores(gold, predictions)
        assert (rescored["f1"], rescored["exact"]) == pytest.approx((results["f1"], results["exact"])), odds
        # The recorded threshold reproduces best_f1, also when "no answer everywhere"
        # is best or the odds tie (issue 29: the official search kept 0.0 then).
        assert results["f1"] == pytest.approx(results["best_f1"], abs=1e-9)
        assert all(set(e) == {"text", "probability", "start_log_prob", "end_log_prob"}
                   for entries in nbest.values() for e in entries)
    _check_model_folder(out, "span_qa")
    _check_reload_reproduces_eval(version, data, out, results, assets, n_best_size=5, max_answer_length=4)


def test_race(tmp_path, assets):
    data = finetune_data.race(str(tmp_path / "race"))
    out = str(tmp_path / "out")
    _run(_argv("race", data, out, assets))
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert set(results) == {"accuracy", "accuracy_high", "accuracy_middle", "eval_loss", "num_examples"}
    assert results["num_examples"] == 6  # 3 records x 2 questions
    # 6 questions: 2 middle, 4 high; the overall accuracy is their weighted mean.
    assert results["accuracy"] == pytest.approx((2 * results["accuracy_middle"] + 4 * results["accuracy_high"]) / 6)
    rows = _read_tsv(os.path.join(out, "race_predictions.tsv"))  # no test split: dev is predicted
    assert rows[0] == ["id", "level", "prediction", "p_A", "p_B", "p_C", "p_D"]
    assert len(rows) == 7 and all(row[2] in "ABCD" for row in rows[1:])
    np.testing.assert_allclose([sum(map(float, row[3:])) for row in rows[1:]], 1.0, atol=1e-5)
    _check_model_folder(out, "multiple_choice")
    _check_reload_reproduces_eval("race", data, out, results, assets)


def test_tagging_and_an_eval_only_rerun(tmp_path, assets):
    data = finetune_data.conll(str(tmp_path / "conll"))
    out = str(tmp_path / "out")
    _run(_argv("tagging", data, out, assets))
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert set(results) == {"token_accuracy", "precision", "recall", "f1", "num_sentences"}
    assert results["num_sentences"] == 4
    assert all(0.0 <= results[k] <= 1.0 for k in ("token_accuracy", "precision", "recall", "f1"))
    with open(os.path.join(out, "tagging_predictions.txt")) as f:
        blocks = [b.splitlines() for b in f.read().strip("\n").split("\n\n")]
    with open(os.path.join(data, "test.txt")) as f:
        test_words = [b.split() for b in f.read().strip("\n").split("\n\n")]
    assert [[line.split("\t")[0] for line in b] for b in blocks] == test_words
    assert all(line.split("\t")[1] in ("B-KA", "I-KA", "O") for b in blocks for line in b)
    with open(os.path.join(out, "task_config.json")) as f:
        assert json.load(f)["tag_names"] == ["B-KA", "I-KA", "O"]
    _check_model_folder(out, "tagging")
    # Evaluating again without training reads the tag set from the saved model.
    os.remove(os.path.join(out, "eval_results.txt"))
    _run([a for a in _argv("tagging", data, out, assets) if not a.startswith("--albert_config_file")
          and a not in ("--do_train", "--do_predict")] + ["--nodo_train", "--nodo_predict"])
    assert read_eval_results(os.path.join(out, "eval_results.txt")) == pytest.approx(results)


class _Interrupt(Exception):
    pass


def test_interrupted_run_resumes_after_the_last_epoch(tmp_path, assets, monkeypatch):
    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"), n_train=8)
    out = str(tmp_path / "out")
    # 8 examples, batch 4, 3 epochs: 6 steps in 3 Keras epochs of 2 steps.
    argv = _argv("glue/sst-2", data, out, assets, "--num_train_epochs=3", "--nodo_predict")
    original = cb.ResumeCheckpoint.on_epoch_end

    def interrupt_after_first_epoch(self, epoch, logs=None):
        original(self, epoch, logs)
        if epoch == 0:
            raise _Interrupt()

    monkeypatch.setattr(cb.ResumeCheckpoint, "on_epoch_end", interrupt_after_first_epoch)
    with pytest.raises(_Interrupt):
        _run(argv)
    assert not os.path.exists(os.path.join(out, "eval_results.txt"))
    monkeypatch.setattr(cb.ResumeCheckpoint, "on_epoch_end", original)
    logged = []
    monkeypatch.setattr(finetune_logging(), "info", lambda fmt, *a: logged.append(fmt % a if a else fmt))
    _run(argv)
    assert any(line.startswith("Resuming from") and "2 batch(es) done (1 epoch(s)), next data pass 1 batch 0, "
               "optimizer step 2" in line for line in logged), logged
    progress = [line for line in logged if line.startswith("step ")]
    assert progress[0].split()[1] == "3/6" and progress[-1].split()[1] == "6/6"  # steps 1-2 not redone
    with open(os.path.join(out, cb.BEST_STATE_FILE)) as f:
        assert 1 <= json.load(f)["epoch"] <= 3
    assert os.path.exists(os.path.join(out, "eval_results.txt"))
    # Run settings are recorded; the same folder refuses other settings, naming both values.
    for flag, message in [("--learning_rate=5e-4", "learning_rate: 0.001 there, 0.0005 now"),
                          ("--seed=2", "seed: 1 there, 2 now"),
                          ("--weight_decay_rate=0.5", "weight_decay_rate: 0.01 there, 0.5 now"),
                          ("--layerwise_lr_decay=0.8", "layerwise_lr_decay: None there, 0.8 now"),
                          ("--nodo_lower_case", "do_lower_case: True there, False now"),
                          ("--nolength_buckets", "length_buckets: True there, False now"),
                          ("--mixed_precision=bfloat16", "mixed_precision: 'float32' there, 'bfloat16' now")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            _run(_argv("glue/sst-2", data, out, assets, "--num_train_epochs=3", flag))
    other = finetune_data.glue_sst2(str(tmp_path / "other" / "SST-2"), n_train=8)
    with pytest.raises(ValueError, match=re.escape(f"data_dir: {os.path.abspath(data)!r} there, "
                                                   f"{os.path.abspath(other)!r} now")):
        _run(_argv("glue/sst-2", other, out, assets, "--num_train_epochs=3"))


def finetune_logging():
    return importlib.import_module("absl.logging")


def test_bad_label_names_the_file_and_line(tmp_path, assets):
    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"))
    path = os.path.join(data, "train.tsv")
    with open(path) as f:
        lines = f.readlines()
    lines[2] = "ka lo mi\tpositive\n"
    with open(path, "w") as f:
        f.writelines(lines)
    with pytest.raises(ValueError, match=r"train\.tsv:3: label 'positive'"):
        _run(_argv("glue/sst-2", data, str(tmp_path / "out"), assets))


def test_flag_errors(tmp_path, assets):
    from absl import app

    data = finetune_data.csv_pairs(str(tmp_path / "pairs"))
    out = str(tmp_path / "out")
    with pytest.raises(app.UsageError, match="--task='glue/nope'"):
        _run(_argv("glue/nope", data, out, assets))
    with pytest.raises(ValueError, match="exactly one of --init_checkpoint"):
        _run(_argv("csv", data, out, assets, f"--init_checkpoint={assets['pretrained']}"))
    with pytest.raises(ValueError, match="Nothing to do"):
        _run(_argv("csv", data, out, assets, "--nodo_train", "--nodo_eval", "--nodo_predict"))
    with pytest.raises(FileNotFoundError, match="--data_dir="):
        _run(_argv("csv", str(tmp_path / "missing"), out, assets))
    with pytest.raises(ValueError, match=r"missing column\(s\) \['headline'\]"):
        _run(_argv("csv", data, out, assets, "--text_column=headline"))


def test_installed_script_prints_one_line_errors(tmp_path, assets):
    # A successful run of the installed script (exit 0) is the shared `finetuned_sst2` fixture's (tests/conftest.py).
    data = finetune_data.csv_pairs(str(tmp_path / "pairs"))
    script = os.path.join(os.path.dirname(sys.executable), "albert-finetune")
    with open(os.path.join(data, "dev.csv"), "a", encoding="utf-8") as f:
        f.write("ka lo,mi ten,maybe\n")  # a label train never had, on line 8
    proc = subprocess.run([script] + _argv("csv", data, str(tmp_path / "out"), assets),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("albert-finetune: ") and "dev.csv:8" in last and "'maybe'" in last, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("extra, expected", [((), True), (("--nolength_buckets",), False)])
def test_length_buckets_flag_reaches_the_task_options(tmp_path, assets, extra, expected):
    finetune._define_flags()
    FLAGS.unparse_flags()
    try:
        FLAGS(["albert-finetune"] + _argv("csv", str(tmp_path), str(tmp_path / "out"), assets, *extra))
        assert finetune.options_from_flags().task_options.length_buckets is expected
    finally:
        FLAGS.unparse_flags()


def test_a_non_finite_loss_stops_at_its_step_naming_the_last_good_checkpoint(tmp_path, assets):
    """Issue 36 F10: fine-tuning had no non-finite guard; a NaN model could be saved as the best on dev."""
    from albert_tf.training.common import TrainingError

    data = finetune_data.glue_sst2(str(tmp_path / "SST-2"), n_train=8)
    out = str(tmp_path / "out")
    # A rate of 1e38 sends AdamW's first update to ~1e38 per weight: step 2's loss overflows.
    argv = _argv("glue/sst-2", data, out, assets, "--num_train_epochs=3", "--nodo_predict", "--learning_rate=1e38",
                 "--warmup_proportion=0", "--save_checkpoints_steps=1")
    with pytest.raises(TrainingError) as stopped:
        _run(argv)
    assert str(stopped.value) == (
        f"Loss is nan at step 2. Last good checkpoint: {os.path.join(out, 'resume', 'ckpt-1')} (the same command "
        "resumes from it). Lower --learning_rate, check the data, or use float32.")
    # Nothing of step 2 was saved: no resume checkpoint, no best-on-dev model.
    assert sorted(os.listdir(os.path.join(out, "resume"))) == ["checkpoint", "ckpt-1.data-00000-of-00001",
                                                               "ckpt-1.index"]
    for name in ("model.weights.safetensors", cb.BEST_STATE_FILE, "eval_results.txt"):
        assert not os.path.exists(os.path.join(out, name)), name
    with pytest.raises(ValueError) as refused:
        _run(argv + ["--on_nonfinite=rollback"])
    assert str(refused.value) == ("--on_nonfinite='rollback': albert-finetune supports 'stop' only (rollback is "
                                  "albert-pretrain's).")
