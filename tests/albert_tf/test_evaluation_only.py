"""Evaluation and prediction from any fine-tuned model folder into any output folder (issue 37 item 4).

albert-finetune without --do_train reads the model of --init_checkpoint and writes only to --output_dir; the
training command run again without --do_train still evaluates the model it trained; a folder with no task head
is refused in one line. The installed binary on every starting point: tests/contracts/test_starting_points.py.
"""

import json
import os

import numpy as np
import pytest

from albert_tf.tasks import evaluation_only
from albert_tf.tasks.runner import FinetuneOptions, read_eval_results
from tests.albert_tf.starting_points import folder_digests, read_only
from tests.albert_tf.task_testlib import train_tiny_spm
from tests.albert_tf.tasks.test_labels_from_model import _saved_classifier, _submitted, _write_csv
from tests.albert_tf.test_finetune_binary import _run


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("evaluation_only_spm")))


def _write(path, content=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(content)


def _options(tmp_path, init=None, output="out", **kwargs):
    return FinetuneOptions("glue/sst-2", str(tmp_path), str(tmp_path / output), do_eval=True,
                           init_checkpoint=init, **kwargs)


def test_which_model_an_evaluation_only_run_reads(tmp_path, monkeypatch):
    """--init_checkpoint with a task head; else the model --output_dir trained from it; else --output_dir's."""
    task_model, pretrained = tmp_path / "task_model", tmp_path / "pretrained"
    _write(str(task_model / "task_config.json"), "{}")
    _write(str(pretrained / "albert_config.json"), "{}")
    trained = tmp_path / "out"
    _write(str(trained / "task_config.json"), "{}")
    # The training run recorded its --init_checkpoint as typed (relative, with a slash); the rerun spells it absolute.
    monkeypatch.chdir(tmp_path)
    _write(str(trained / "finetune_run.json"), json.dumps({"init_checkpoint": "./pretrained/"}))
    assert evaluation_only.model_folder(_options(tmp_path, str(task_model))) == str(task_model)
    assert evaluation_only.model_folder(_options(tmp_path, str(pretrained))) == str(trained)
    assert evaluation_only.model_folder(_options(tmp_path)) == str(trained)
    assert evaluation_only.model_folder(_options(tmp_path, str(pretrained), do_train=True)) is None


@pytest.mark.parametrize("case", ["other_start", "no_run_state", "empty_output"])
def test_a_folder_without_a_task_head_is_refused_in_one_line(tmp_path, case):
    pretrained = tmp_path / "pretrained"
    _write(str(pretrained / "albert_config.json"), "{}")
    if case != "empty_output":
        _write(str(tmp_path / "out" / "task_config.json"), "{}")
    if case == "other_start":  # --output_dir holds a model trained from another folder
        _write(str(tmp_path / "out" / "finetune_run.json"), json.dumps({"init_checkpoint": str(tmp_path / "x")}))
    with pytest.raises(FileNotFoundError) as refused:
        evaluation_only.model_folder(_options(tmp_path, str(pretrained)))
    assert str(refused.value) == (
        f"--init_checkpoint={str(pretrained)!r} holds no task head (no task_config.json): it is an encoder or "
        "pretraining model; without --do_train, --do_eval/--do_predict need a fine-tuned model (an albert-finetune "
        "--output_dir or a save_task_model folder); add --do_train to fine-tune it first.")


def test_missing_folders_are_refused_in_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        evaluation_only.model_folder(_options(tmp_path, str(tmp_path / "nowhere")))
    assert str(missing.value) == f"--init_checkpoint={str(tmp_path / 'nowhere')!r} does not exist."
    with pytest.raises(FileNotFoundError) as empty:
        evaluation_only.model_folder(_options(tmp_path))
    assert str(empty.value) == (
        f"--output_dir={str(tmp_path / 'out')!r} holds no fine-tuned model (no task_config.json): without "
        "--do_train, --do_eval/--do_predict evaluate the fine-tuned model of --init_checkpoint, else the one a "
        "training run saved in --output_dir.")


def test_eval_and_predict_from_a_model_folder_into_a_new_folder(tmp_path, spm):
    """A hand-set classifier (always "b", as tests/albert_tf/tasks/test_labels_from_model.py): results known by
    hand, in the new folder only; the model folder is read-only for the run and unchanged, file by file."""
    model = _saved_classifier(str(tmp_path / "model"), spm, ["a", "b", "c"], answer=1)
    data = str(tmp_path / "data")
    _write_csv(os.path.join(data, "dev.csv"), [["ka lo", "b"], ["mi ten", "c"], ["ser qua", "b"], ["vi don", "a"]])
    _write_csv(os.path.join(data, "test.csv"), [["ka mi"], ["lo ten"]], header=("text",))
    before = folder_digests(model)
    out = str(tmp_path / "results")
    with read_only(model):
        # No --spm_model_file: the model folder's own; labels, length and lower-casing are the model's.
        _run([f"--init_checkpoint={model}", "--task=csv", f"--data_dir={data}", f"--output_dir={out}",
              "--eval_batch_size=8", "--strategy=default", "--mixed_precision=float32", "--nodo_train",
              "--do_eval", "--do_predict", "--optimizer=adamw"])
    assert folder_digests(model) == before  # nothing written, changed or locked there
    assert sorted(os.listdir(out)) == ["eval_results.txt", "submit_results.tsv", "test_results.tsv"]
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert (results["accuracy"], results["num_examples"]) == (0.5, 4)
    assert results["eval_loss"] == pytest.approx(np.mean([np.log(2 + np.exp(10.0)) if y != "b" else
                                                          np.log(1 + 2 * np.exp(-10.0)) for y in "bcba"]), rel=1e-4)
    assert _submitted(out) == [["index", "prediction"], ["test-2", "b"], ["test-3", "b"]]


def test_another_vocabulary_than_the_evaluated_models_is_refused_naming_its_folder(tmp_path, spm):
    model = _saved_classifier(str(tmp_path / "model"), spm, ["a", "b"], answer=0)
    other = train_tiny_spm(str(tmp_path), vocab_size=50)  # other pieces
    data = str(tmp_path / "data")
    _write_csv(os.path.join(data, "dev.csv"), [["ka lo", "a"]])
    with pytest.raises(ValueError) as refused:
        _run([f"--init_checkpoint={model}", "--task=csv", f"--data_dir={data}", f"--output_dir={tmp_path / 'out'}",
              f"--spm_model_file={other}", "--strategy=default", "--mixed_precision=float32", "--nodo_train",
              "--do_eval", "--optimizer=adamw"])
    assert f"is not the vocabulary of --init_checkpoint={model}: {model}/spm.model " in str(refused.value)
    assert not os.path.exists(tmp_path / "out" / "eval_results.txt")
