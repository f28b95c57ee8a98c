"""The starting points of the contract matrix (issue 37): every folder a user starts from x what they do with it.

Rows (`STARTS`):

- released_folder: a google-research release's exact layout (albert_config.json, 30k-clean.model, model.ckpt-best.*,
  no `checkpoint` file) with the golden TF1 weights;
- hugging_face_folder: config.json, spiece.model, model.safetensors with the golden Hugging Face weights;
- demo_folder: what albert-pretrain leaves (albert-demo's demo_output/model), made by run_pretraining itself;
- from_pretrained_model: `AlbertClassifier.from_pretrained(demo folder)` in Python, fit one step and saved with
  `save_task_model`, then handed to the binaries.

Columns (the test functions):

- fine_tune: the installed `albert-finetune` with only --init_checkpoint (no --spm_model_file, no
  --albert_config_file, no --max_seq_length): the folder's vocabulary and length (its 32 positions) are used;
- eval_only: `albert-finetune --do_eval` without --do_train from the fine-tuned folder into a NEW folder: the same
  results as the training run's own evaluation; the model folder (read-only during the run) is unchanged, file by
  file, and holds no lock; the start folder itself (no task head) is refused, the from_pretrained one accepted;
- predict: `albert-finetune --do_predict` in the same run (one run of both per start): probabilities equal the
  library's, labels their argmax, and the accuracy of the predicted labels is the evaluation's accuracy;
- export: `albert-export` of the fine-tuned folder; the SavedModel answers as the library's model does.

Each start costs one fine-tune, one evaluation-only run and one export (built once per module, on first use).
"""

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.albert_tf import starting_points
from tests.albert_tf.task_testlib import train_tiny_spm
from tests.albert_tf.tasks import finetune_data

STARTS = ("released_folder", "hugging_face_folder", "demo_folder", "from_pretrained_model")
BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
POSITIONS = 32  # every start's max_position_embeddings: the length albert-finetune takes when none is given
N_DEV = 6


def _installed(name, *argv, timeout=300):
    """Runs an installed albert-* binary; fails the test with its stderr's tail when it fails."""
    done = subprocess.run([os.path.join(BIN, name), *argv], env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{name} {' '.join(argv)}\n{done.stderr[-3000:]}"
    return done


def _from_pretrained_model(folder, base):
    """The Python path: from_pretrained on `base`, one fit step, save_task_model into `folder`."""
    import keras
    import tensorflow as tf

    import albert_tf

    keras.utils.set_random_seed(3)
    clf = albert_tf.AlbertClassifier.from_pretrained(base, 2, label_names=["0", "1"])
    assert clf.preprocessor.max_seq_length == POSITIONS  # 128 capped at the model's positions
    clf.compile(optimizer=albert_tf.optimizers.adamw(1e-3, num_train_steps=1, warmup_proportion=0.0))
    texts = ["ka lo mi ten", "ser qua vi don", "lo ka vi", "mi ten ser"]
    clf.fit(tf.data.Dataset.from_tensor_slices((texts, [1, 0, 1, 0])).batch(4), epochs=1, verbose=0)
    albert_tf.save_task_model(clf, folder)
    return folder


def _build_start(start, root):
    """The start's folder and the SentencePiece model it holds."""
    if start in ("released_folder", "hugging_face_folder"):
        spm = starting_points.vocabulary(os.path.join(root, "spm50"))
        build = getattr(starting_points, start)
        return build(os.path.join(root, start), spm), spm
    spm = train_tiny_spm(os.path.join(root, "spm120"))
    demo = os.path.join(root, "demo_folder")
    if not os.path.exists(demo):
        starting_points.demo_folder(demo, spm, vocab_size=120)
    if start == "demo_folder":
        return demo, spm
    return _from_pretrained_model(os.path.join(root, start), demo), spm


def _finetune(init, data, out):
    return _installed("albert-finetune", f"--init_checkpoint={init}", "--task=glue/sst-2", f"--data_dir={data}",
                      f"--output_dir={out}", "--train_batch_size=4", "--eval_batch_size=8", "--learning_rate=1e-3",
                      "--train_step=2", "--warmup_step=0", "--optimizer=adamw", "--mixed_precision=float32",
                      "--strategy=default", "--seed=1", "--do_train", "--do_eval")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """Builds each start and fine-tunes it on first use: get(start) -> {"start", "spm", "model", "dev", "log"}."""
    root = str(tmp_path_factory.mktemp("starting_points"))
    for name in ("spm50", "spm120"):
        os.makedirs(os.path.join(root, name))
    data = finetune_data.glue_sst2(os.path.join(root, "SST-2"), n_train=8, n_dev=N_DEV, n_test=3)
    # Evaluation and prediction data: the dev split alone (prediction then predicts it, so its labels are known).
    dev_only = os.path.join(root, "SST-2-dev")
    os.makedirs(dev_only)
    os.link(os.path.join(data, "dev.tsv"), os.path.join(dev_only, "dev.tsv"))
    built = {}

    def get(start):
        if start not in built:
            folder, spm = _build_start(start, root)
            model = os.path.join(root, start + "-finetuned")
            done = _finetune(folder, data, model)
            built[start] = {"start": folder, "spm": spm, "model": model, "dev": dev_only, "log": done.stderr,
                            "root": root}
        return built[start]

    return get


def _read_only_run(model, *argv):
    """albert-finetune with the model folder made read-only for the run; returns (run, digests before, after)."""
    before = starting_points.folder_digests(model)
    with starting_points.read_only(model):
        done = _installed("albert-finetune", f"--init_checkpoint={model}", *argv)
    return done, before, starting_points.folder_digests(model)


def _dev_rows(dev):
    with open(os.path.join(dev, "dev.tsv"), encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def _eval_results(folder):
    from albert_tf.tasks.runner import read_eval_results

    return read_eval_results(os.path.join(folder, "eval_results.txt"))


def _library(model, texts):
    """The library's answer: the fine-tuned folder loaded in Python, logits of raw texts."""
    import albert_tf

    return np.asarray(albert_tf.load_task_model(model).predict(texts, verbose=0), np.float64)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("start", STARTS)
def test_fine_tune(session, start):
    """--init_checkpoint alone: the start's own vocabulary and its 32 positions; a complete task model folder."""
    from albert_tf.tasks.run_state import file_sha256

    run = session(start)
    model = run["model"]
    for name in ("albert_config.json", "model.weights.safetensors", "task_config.json", "spm.model"):
        assert os.path.exists(os.path.join(model, name)), name
    with open(os.path.join(model, "finetune_run.json")) as f:
        settings = json.load(f)
    assert settings["max_seq_length"] == POSITIONS
    assert settings["spm_model_sha256"] == file_sha256(run["spm"])
    with open(os.path.join(model, "spm.model"), "rb") as copied, open(run["spm"], "rb") as original:
        assert copied.read() == original.read()
    with open(os.path.join(model, "task_config.json")) as f:
        task_config = json.load(f)
    assert (task_config["task_type"], task_config["label_names"], task_config["max_seq_length"]) == (
        "classification", ["0", "1"], POSITIONS)
    results = _eval_results(model)
    assert results["num_examples"] == N_DEV
    assert "step 2/2 " in run["log"]


def _evaluated(session, start):
    """One run without --do_train (--do_eval --do_predict) from the start's fine-tuned folder into a new folder,
    with the model folder read-only during it: {"out", "log", "before", "after"} (the folder's digests)."""
    run = session(start)
    if "evaluated" not in run:
        out = os.path.join(run["root"], start + "-evaluated")
        done, before, after = _read_only_run(
            run["model"], "--task=glue/sst-2", f"--data_dir={run['dev']}", f"--output_dir={out}",
            "--eval_batch_size=8", "--nodo_train", "--do_eval", "--do_predict", "--mixed_precision=float32",
            "--strategy=default")
        run["evaluated"] = {"out": out, "log": done.stderr, "before": before, "after": after}
    return run, run["evaluated"]


@pytest.mark.parametrize("start", STARTS)
def test_eval_only(session, start, tmp_path):
    """Without --do_train: the fine-tuned folder's model, evaluated into a new folder; the model folder untouched."""
    from albert_tf.tasks import evaluation_only
    from albert_tf.tasks.runner import FinetuneOptions

    run, evaluated = _evaluated(session, start)
    assert evaluated["after"] == evaluated["before"]  # no file written, changed or locked in the model's folder
    assert sorted(os.listdir(evaluated["out"])) == ["eval_results.txt", "submit_results.tsv", "test_results.tsv"]
    got, trained = _eval_results(evaluated["out"]), _eval_results(run["model"])
    # The training run evaluated the same saved model on the same dev split.
    assert got["num_examples"] == trained["num_examples"] == N_DEV
    assert got["accuracy"] == trained["accuracy"]
    assert got["eval_loss"] == pytest.approx(trained["eval_loss"], abs=1e-6)
    assert f"--init_checkpoint={run['model']} (read only)" in evaluated["log"]
    # The start itself: a folder without a task head is refused before anything runs; a save_task_model folder
    # (the from_pretrained start) is a model to evaluate.
    options = FinetuneOptions("glue/sst-2", run["dev"], str(tmp_path / "x"), init_checkpoint=run["start"],
                              do_eval=True)
    if start == "from_pretrained_model":
        assert evaluation_only.model_folder(options) == run["start"]
    else:
        with pytest.raises(FileNotFoundError, match=r"holds no task head \(no task_config.json\)"):
            evaluation_only.model_folder(options)


@pytest.mark.parametrize("start", STARTS)
def test_predict(session, start):
    """Without --do_train: predictions in a new folder equal the library's; their accuracy is the evaluation's."""
    run, evaluated = _evaluated(session, start)
    assert evaluated["after"] == evaluated["before"]
    out = evaluated["out"]
    rows = _dev_rows(run["dev"])
    with open(os.path.join(out, "test_results.tsv"), encoding="utf-8") as f:
        probabilities = np.array([[float(v) for v in line.split("\t")] for line in f.read().splitlines()])
    with open(os.path.join(out, "submit_results.tsv"), encoding="utf-8", newline="") as f:
        submitted = list(csv.DictReader(f, delimiter="\t"))
    want = _softmax(_library(run["model"], [r["sentence"] for r in rows]))
    np.testing.assert_allclose(probabilities, want, atol=2e-6, rtol=0)  # the file keeps 6 decimals
    labels = [s["prediction"] for s in submitted]
    assert labels == [str(i) for i in want.argmax(-1)]
    accuracy = np.mean([label == r["label"] for label, r in zip(labels, rows, strict=True)])
    assert accuracy == pytest.approx(_eval_results(out)["accuracy"], abs=1e-9)


@pytest.mark.parametrize("start", STARTS)
def test_export(session, start, tmp_path):
    """albert-export of the fine-tuned folder: the SavedModel's logits, probabilities and labels are the library's."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece op)

    run = session(start)
    export_dir = str(tmp_path / "export")
    _installed("albert-export", f"--checkpoint={run['model']}", "--head=classifier", f"--export_dir={export_dir}",
               "--version=1")
    texts = [r["sentence"] for r in _dev_rows(run["dev"])] + ["Ka LO, mi!", "don"]
    served = tf.saved_model.load(os.path.join(export_dir, "1")).signatures["serving_default"](text=tf.constant(texts))
    want = _library(run["model"], texts)
    np.testing.assert_allclose(served["logits"].numpy(), want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(served["probabilities"].numpy(), _softmax(want), atol=1e-5, rtol=0)
    assert [v.decode() for v in served["label"].numpy()] == [str(i) for i in want.argmax(-1)]
    # Not a constant answer: the texts' logits differ (a model that ignored its input would not pass).
    assert np.ptp(want, axis=0).max() > 1e-4, want
