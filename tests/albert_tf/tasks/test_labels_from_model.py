"""Evaluation and prediction without --do_train take the labels from the fine-tuned model (issue 35 N1).

A hand-set classifier (zero head weights, one large bias) answers the same label for every text, so the
expected metrics and submit_results.tsv rows are known by hand. The data folder's labels are a subset
of the model's, in other positions, so a run that read the labels from the data would report other ids.
"""

import csv
import os

import numpy as np
import pytest

import albert_tf
from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from albert_tf.tasks.runner import read_eval_results
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm
from tests.albert_tf.test_finetune_binary import _run


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("labels_spm")))


def _saved_classifier(output_dir, spm, label_names, answer):
    """A model folder whose classifier answers label_names[answer] for every text."""
    model = albert_tf.AlbertClassifier(tiny_config(), num_classes=len(label_names), label_names=label_names,
                                       preprocessor=AlbertTextPreprocessor(spm, max_seq_length=32),
                                       dropout_rate=0.0)
    model.head.output_weights.assign(np.zeros(model.head.output_weights.shape, np.float32))
    model.head.output_bias.assign(10.0 * np.eye(len(label_names), dtype=np.float32)[answer])
    albert_tf.save_task_model(model, output_dir, spm_model_file=spm)
    return output_dir


def _write_csv(path, rows, header=("text", "label")):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _eval_argv(task, data_dir, output_dir, spm, *actions):
    # Every shared flag explicit: another binary's test in this process (albert-pretrain's, under xdist) may have
    # defined it first with its own default (--optimizer=lamb).
    return [f"--task={task}", f"--data_dir={data_dir}", f"--output_dir={output_dir}", f"--spm_model_file={spm}",
            "--eval_batch_size=8", "--strategy=default", "--mixed_precision=float32", "--nodo_train",
            "--optimizer=adamw", "--train_batch_size=4", "--learning_rate=1e-3", "--seed=1", "--log_steps=1",
            *actions]


def _submitted(output_dir):
    with open(os.path.join(output_dir, "submit_results.tsv"), encoding="utf-8", newline="") as f:
        return list(csv.reader(f, delimiter="\t"))


def test_csv_eval_and_predict_use_the_models_labels(tmp_path, spm):
    out = _saved_classifier(str(tmp_path / "model"), spm, ["a", "b", "c"], answer=1)  # always "b"
    data = str(tmp_path / "data")
    # The files know only a and c: learned from the train file, "b" (id 1) would read as "c".
    _write_csv(os.path.join(data, "train.csv"), [["ka lo", "a"], ["mi ten", "c"]])
    _write_csv(os.path.join(data, "dev.csv"), [["ka lo", "a"], ["mi ten", "c"], ["ser qua", "c"],
                                               ["vi don", "a"]])
    _write_csv(os.path.join(data, "test.csv"), [["ka mi"], ["lo ten"]], header=("text",))
    _run(_eval_argv("csv", data, out, spm, "--do_eval", "--do_predict"))
    results = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert results["accuracy"] == 0.0 and results["num_examples"] == 4  # "b" is never right
    # logits (0, 10, 0) on every row: the right label's probability is 1 / (2 + e^10).
    assert results["eval_loss"] == pytest.approx(np.log(2 + np.exp(10.0)), rel=1e-4)
    assert _submitted(out) == [["index", "prediction"], ["test-2", "b"], ["test-3", "b"]]


def test_csv_predict_on_a_folder_holding_only_a_test_file(tmp_path, spm):
    out = _saved_classifier(str(tmp_path / "model"), spm, ["neg", "pos"], answer=0)
    data = str(tmp_path / "data")
    _write_csv(os.path.join(data, "test.csv"), [["ka lo"], ["mi"], ["ten ser"]], header=("text",))
    _run(_eval_argv("csv", data, out, spm, "--nodo_eval", "--do_predict"))
    assert _submitted(out)[1:] == [["test-2", "neg"], ["test-3", "neg"], ["test-4", "neg"]]


def test_a_dev_label_the_model_does_not_know_is_refused_naming_file_line_and_label(tmp_path, spm):
    out = _saved_classifier(str(tmp_path / "model"), spm, ["a", "b"], answer=0)
    data = str(tmp_path / "data")
    # The train file knows "z": only the model's labels count.
    _write_csv(os.path.join(data, "train.csv"), [["ka", "a"], ["lo", "z"]])
    _write_csv(os.path.join(data, "dev.csv"), [["ka", "a"], ["lo", "z"]])
    with pytest.raises(ValueError, match=r"dev\.csv:3: example 'dev-3' has label 'z', not one of the model's "
                                         r"labels \['a', 'b'\]"):
        _run(_eval_argv("csv", data, out, spm, "--do_eval"))


def _glue_rte(folder, labels):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "dev.tsv"), "w", encoding="utf-8") as f:
        f.write("index\tsentence1\tsentence2\tlabel\n")
        f.writelines(f"{i}\tka lo\tmi ten\t{label}\n" for i, label in enumerate(labels))
    return folder


def test_glue_eval_uses_the_models_label_order(tmp_path, spm):
    # A model whose ids are RTE's in the other order: 0 is not_entailment. It answers id 0 everywhere.
    out = _saved_classifier(str(tmp_path / "model"), spm, ["not_entailment", "entailment"], answer=0)
    data = _glue_rte(str(tmp_path / "RTE"), ["not_entailment", "entailment", "not_entailment"])
    _run(_eval_argv("glue/rte", data, out, spm, "--do_eval"))
    assert read_eval_results(os.path.join(out, "eval_results.txt"))["accuracy"] == pytest.approx(2 / 3)


def test_glue_eval_of_a_model_of_other_labels_is_refused(tmp_path, spm):
    # An MNLI model on RTE: "entailment" is id 1 of MNLI's three, and RTE's "not_entailment" is not one of them.
    out = _saved_classifier(str(tmp_path / "model"), spm, ["contradiction", "entailment", "neutral"], answer=1)
    data = _glue_rte(str(tmp_path / "RTE"), ["entailment", "not_entailment"])
    with pytest.raises(ValueError, match=r"dev\.tsv:3: example 'dev-3' has label 'not_entailment', not one of "
                                         r"the model's labels"):
        _run(_eval_argv("glue/rte", data, out, spm, "--do_eval"))
