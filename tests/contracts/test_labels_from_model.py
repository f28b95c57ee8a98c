"""The contract matrix's "labels from the model" column: evaluation and prediction without --do_train name each
answer with the saved model's labels, never with labels learned again from the data folder (issue 35 N1).

Every head that has label names gets a hand-set model (zero head weights, one large bias) that answers one label
everywhere. That label's id in the model differs from its id among the labels the data folder holds, so a run
that read the labels from the data would write another name; the expected files are known by hand. The heads
without label names (the encoder, the pretrainer, regression, span QA, multiple choice: their answers are
numbers, spans or choice positions) are the matrix's "n/a" cells.
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

LABELLED_ROWS = ("classifier_single", "classifier_pair", "classifier_mean_pooling", "tagging")
MODEL_LABELS = ["a", "b", "c"]  # the model answers "b" (id 1) everywhere
TAGS = ["B-X", "I-X", "O"]  # the model tags every word "I-X" (id 1)


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("labels_column_spm")))


def _answering(model, answer: int, num_labels: int):
    model.head.output_weights.assign(np.zeros(model.head.output_weights.shape, np.float32))
    model.head.output_bias.assign(10.0 * np.eye(num_labels, dtype=np.float32)[answer])
    return model


def _saved_model(row: str, folder: str, spm: str) -> str:
    preprocessor = AlbertTextPreprocessor(spm, max_seq_length=32)
    if row == "tagging":
        model = albert_tf.AlbertTokenClassifier(tiny_config(), num_tags=len(TAGS), tag_names=TAGS,
                                                preprocessor=preprocessor, dropout_rate=0.0)
        _answering(model, 1, len(TAGS))
    else:
        model = albert_tf.AlbertClassifier(
            tiny_config(), num_classes=len(MODEL_LABELS), label_names=MODEL_LABELS, preprocessor=preprocessor,
            dropout_rate=0.0, pooling="mean" if row == "classifier_mean_pooling" else "pooled",
            text_pairs=row == "classifier_pair")
        _answering(model, 1, len(MODEL_LABELS))
    albert_tf.save_task_model(model, folder, spm_model_file=spm)
    return folder


def _write_csv(path, header, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _classifier_data(folder: str, pairs: bool) -> str:
    """train/dev/test.csv knowing only "a" and "c": relearned from them, the model's id 1 ("b") reads as "c"."""
    os.makedirs(folder, exist_ok=True)
    texts = (("text", "text_b") if pairs else ("text",))
    pair = (lambda row: row) if pairs else (lambda row: row[:1] + row[2:])
    _write_csv(os.path.join(folder, "train.csv"), texts + ("label",),
               [pair(["ka lo", "mi", "a"]), pair(["mi ten", "ka", "c"])])
    _write_csv(os.path.join(folder, "dev.csv"), texts + ("label",),
               [pair(["ka lo", "ten", "a"]), pair(["mi ten", "lo", "c"]), pair(["ser", "ka", "b"])])
    _write_csv(os.path.join(folder, "test.csv"), texts, [pair(["ka mi", "lo"]), pair(["lo ten", "ser"])])
    return folder


def _tagging_data(folder: str) -> str:
    """CoNLL files holding "O" and "B-X" only: relearned from them (sorted: B-X, O), id 1 reads as "O"."""
    os.makedirs(folder, exist_ok=True)
    for split, tagged in (("train", True), ("dev", True), ("test", False)):
        sentences = [[("ka", "B-X"), ("lo", "O")], [("mi", "O"), ("ten", "B-X"), ("ser", "O")]]
        with open(os.path.join(folder, f"{split}.txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join("\n".join(f"{w} NN {t}" if tagged else w for w, t in s) for s in sentences) + "\n")
    return folder


def _argv(row, data_dir, output_dir, spm, *actions):
    task = "tagging" if row == "tagging" else "csv"
    pair = ("--text_b_column=text_b",) if row == "classifier_pair" else ()
    return [f"--task={task}", f"--data_dir={data_dir}", f"--output_dir={output_dir}", f"--spm_model_file={spm}",
            "--eval_batch_size=8", "--strategy=default", "--mixed_precision=float32", "--nodo_train",
            "--optimizer=adamw", "--train_batch_size=4", "--learning_rate=1e-3", "--seed=1", "--log_steps=1",
            "--max_seq_length=32", *pair, *actions]


@pytest.mark.parametrize("row", LABELLED_ROWS)
def test_eval_and_predict_name_answers_with_the_models_labels(row, tmp_path, spm):
    output_dir = _saved_model(row, str(tmp_path / "model"), spm)
    if row == "tagging":
        data = _tagging_data(str(tmp_path / "data"))
        _run(_argv(row, data, output_dir, spm, "--do_eval", "--do_predict"))
        with open(os.path.join(output_dir, "tagging_predictions.txt"), encoding="utf-8") as f:
            predicted = [line.split("\t") for line in f.read().split("\n") if line]
        assert predicted == [["ka", "I-X"], ["lo", "I-X"], ["mi", "I-X"], ["ten", "I-X"], ["ser", "I-X"]]
        return
    data = _classifier_data(str(tmp_path / "data"), pairs=row == "classifier_pair")
    _run(_argv(row, data, output_dir, spm, "--do_eval", "--do_predict"))
    results = read_eval_results(os.path.join(output_dir, "eval_results.txt"))
    assert results["num_examples"] == 3 and results["accuracy"] == pytest.approx(1 / 3)  # only the "b" row
    with open(os.path.join(output_dir, "submit_results.tsv"), encoding="utf-8", newline="") as f:
        assert list(csv.reader(f, delimiter="\t"))[1:] == [["test-2", "b"], ["test-3", "b"]]
