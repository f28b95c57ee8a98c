"""Sentence(-pair) classification and regression: GLUE and any CSV/TSV/JSONL file.

The readers (`pipelines.finetune.glue`, `pipelines.finetune.tabular`) return
raw strings and label ids; `AlbertClassifier` tokenizes inside the graph, so
the training dataset is strings in, label ids (or floats) out.

Metrics as the original run_classifier reports them (`albert_tf.metrics`):
accuracy (+ matthew_corr for CoLA, + f1 for MRPC/QQP), pearson/spearman/mse
for STS-B and regression; eval_loss everywhere. The best dev checkpoint is
chosen by pearson (regression), matthew_corr (CoLA) or accuracy.
Prediction writes test_results.tsv (one row of class probabilities per
example, or the predicted value) and submit_results.tsv (``index\tprediction``
header, then guid and label name).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from albert_tf.tasks.base import FinetuneTask, TaskOptions, pretrained_or_random, predict_in_batches
from pipelines.fileio import atomic_write
from pipelines.finetune.common import softmax


@dataclasses.dataclass
class ClassificationData:
    """One split of a classification task.

    Attributes:
        texts: first texts.
        text_pairs: second texts, or None for single-sentence tasks.
        labels: int label ids, float targets (regression), or None (unlabelled test).
        label_names: class names in id order ([] for regression).
        guids: example ids (for submit_results.tsv).
        lengths: packed lengths, computed once for length buckets (`packed_lengths`).
    """

    texts: List[str]
    text_pairs: Optional[List[str]]
    labels: Optional[np.ndarray]
    label_names: List[str]
    guids: List[str]
    lengths: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.texts)

    def inputs(self):
        """What the classifier's call takes: a string array, or a (text, text_pair) tuple of them."""
        texts = np.asarray(self.texts, dtype=object)
        if self.text_pairs is None:
            return texts
        return texts, np.asarray(self.text_pairs, dtype=object)


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy of integer labels.

    Example:
    >>> round(cross_entropy(np.array([[0.0, 0.0]]), np.array([1])), 4)  # log 2
    0.6931
    """
    p = softmax(logits)
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(labels)), labels], 1e-12))))


def from_text_examples(examples: Sequence, label_names: Sequence[str], regression: bool) -> ClassificationData:
    """`ClassificationData` from the readers' `TextExample`s (labels None when unlabelled)."""
    from pipelines.finetune.common import encode_labels

    pairs = [e.text_b is not None for e in examples]
    if any(pairs) and not all(pairs):
        lone = examples[pairs.index(False)]
        raise ValueError(f"{lone.source}: example {lone.guid!r} has no second text while others have one.")
    labelled = [e.label is not None for e in examples]
    labels = encode_labels(examples, label_names, regression) if all(labelled) else None
    return ClassificationData(texts=[e.text_a for e in examples],
                              text_pairs=[e.text_b for e in examples] if pairs[0] else None,
                              labels=labels, label_names=list(label_names), guids=[e.guid for e in examples])


def packed_lengths(data: ClassificationData, options: TaskOptions, chunk: int = 4096) -> np.ndarray:
    """Tokens of each example as the classifier packs it: [CLS] A [SEP] (B [SEP]),
    at most `options.max_seq_length` (SentencePiece in the graph, `chunk` texts a call).

    Example:
    >>> data = ClassificationData(["a b", "c"], None, None, [], ["1", "2"])
    >>> packed_lengths(data, TaskOptions(spm_model_file="spm.model"))  # doctest: +SKIP
    array([4, 3])
    """
    from albert_tf.layers.preprocessor import AlbertTextPreprocessor

    pre = AlbertTextPreprocessor(options.spm_model_file, max_seq_length=options.max_seq_length,
                                 do_lower_case=options.do_lower_case)

    def pieces(texts: Sequence[str]) -> np.ndarray:
        counts = [pre.tokenize(tf.constant(texts[i:i + chunk])).row_lengths().numpy()
                  for i in range(0, len(texts), chunk)]
        return np.concatenate(counts).astype(np.int64)

    if data.text_pairs is None:
        total = pieces(data.texts) + 2
    else:
        total = pieces(data.texts) + pieces(data.text_pairs) + 3
    return np.minimum(total, options.max_seq_length)


class ClassificationTask(FinetuneTask):
    """Shared by GLUE and CSV: model, loss, metrics, prediction files."""

    #: the name `albert_tf.metrics.classification_scores` knows the task by
    metric_task = "accuracy"

    def __init__(self, name: str, options: TaskOptions):
        super().__init__(name, options)
        self.label_names: Optional[List[str]] = None
        #: the saved model's labels in an evaluation-only run (`adopt_saved_model`); None when training
        self.model_label_names: Optional[List[str]] = None

    def adopt_saved_model(self, task_config: Dict[str, Any]) -> None:
        """Evaluation and prediction without training read labels as the model knows them (task_config.json),
        not as a train file in data_dir would list them."""
        from absl import logging

        classes = task_config.get("num_classes")
        if classes is not None and self.is_regression != (int(classes) == 1):
            kind = "a regression" if self.is_regression else "a classification"
            raise ValueError(f"--task={self.name} is {kind} task but the saved model has num_classes={classes!r}.")
        names = list(task_config.get("label_names") or [])
        if not self.is_regression and not names:
            logging.warning("The saved model has no label_names: its label ids are taken to be the data's "
                            "(sorted labels of the train file, or the GLUE task's list).")
            return
        self.model_label_names = self.label_names = names

    def _labels_for(self, examples: Sequence, label_names: Sequence[str]) -> List[str]:
        """`label_names` when training; the model's, checked against every labelled example, otherwise."""
        from pipelines.finetune.common import encode_labels

        if self.model_label_names is None:
            return list(label_names)
        encode_labels([e for e in examples if e.label is not None], self.model_label_names, self.is_regression,
                      label_set="the model's labels")
        return list(self.model_label_names)

    @property
    def is_regression(self) -> bool:
        raise NotImplementedError

    @property
    def selection_metric(self) -> str:  # type: ignore[override]
        if self.is_regression:
            return "pearson"
        return "matthew_corr" if self.metric_task == "cola" else "accuracy"

    def num_examples(self, data: ClassificationData) -> int:
        return len(data)

    def _remember_labels(self, data: Optional[ClassificationData]) -> Optional[ClassificationData]:
        if data is not None and data.label_names and self.label_names is None:
            self.label_names = list(data.label_names)
        return data

    def train_items(self, data: ClassificationData):
        if data.labels is None:
            raise ValueError(f"The training split of {self.name} has no labels.")
        return data.inputs(), data.labels.astype(np.float32 if self.is_regression else np.int32)

    def pass_batches(self, data: ClassificationData, num_items: int, batch_size: int, seed: int, pass_index: int):
        """With `options.length_buckets` (and a SentencePiece model): batches of
        similar length, in random order (`pipelines.finetune.common.length_bucketed_pass`),
        so a batch pads only to lengths close to its own; otherwise random batches.
        Under `options.static_shapes`: full batches only."""
        from pipelines.finetune.common import length_bucketed_pass

        if not (self.options.length_buckets and self.options.spm_model_file):
            return super().pass_batches(data, num_items, batch_size, seed, pass_index)
        if data.lengths is None:
            data.lengths = packed_lengths(data, self.options)
        return length_bucketed_pass(data.lengths, batch_size, seed, pass_index,
                                    drop_remainder=self.options.static_shapes)

    def build_model(self, config, init_checkpoint, train_data: ClassificationData) -> keras.Model:
        from albert_tf.models import AlbertClassifier

        num_classes = 1 if self.is_regression else len(train_data.label_names)
        kwargs = {"num_classes": num_classes, "dropout_rate": self.options.dropout_rate,
                  "pooling": self.options.pooling, "text_pairs": train_data.text_pairs is not None}
        if not self.is_regression:
            kwargs["label_names"] = list(train_data.label_names)
        return pretrained_or_random(AlbertClassifier, config, init_checkpoint, self.options, **kwargs)

    def compile_metrics(self):
        return None if self.is_regression else [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def logits(self, model: keras.Model, data: ClassificationData, batch_size: int) -> np.ndarray:
        return np.asarray(predict_in_batches(model, data.inputs(), batch_size, self.options), np.float64)

    def evaluate(self, model: keras.Model, data: ClassificationData, batch_size: int) -> Dict[str, float]:
        from albert_tf import metrics

        if data.labels is None:
            raise ValueError(f"The dev split of {self.name} has no labels to evaluate against.")
        logits = self.logits(model, data, batch_size)
        if self.is_regression:
            values = logits[:, 0]
            results = metrics.classification_scores("regression", data.labels, values)
            results["eval_loss"] = float(np.mean((values - data.labels) ** 2))
        else:
            results = metrics.classification_scores(self.metric_task, data.labels, logits.argmax(-1))
            results["eval_loss"] = cross_entropy(logits, np.asarray(data.labels, np.int64))
        results["num_examples"] = len(data)
        return {k: float(v) if k != "num_examples" else int(v) for k, v in results.items()}

    def predict(self, model: keras.Model, data: ClassificationData, batch_size: int, output_dir: str) -> List[str]:
        logits = self.logits(model, data, batch_size)
        test_path = os.path.join(output_dir, "test_results.tsv")
        submit_path = os.path.join(output_dir, "submit_results.tsv")
        names = getattr(model, "task_config", {}).get("label_names") or self.label_names or []
        with atomic_write(test_path) as test, atomic_write(submit_path) as submit:
            submit.write("index\tprediction\n")
            for guid, row in zip(data.guids, logits):
                if self.is_regression:
                    test.write(f"{row[0]:.6f}\n")
                    submit.write(f"{guid}\t{row[0]:.6f}\n")
                else:
                    probs = softmax(row[None])[0]
                    test.write("\t".join(f"{p:.6f}" for p in probs) + "\n")
                    best = int(probs.argmax())
                    submit.write(f"{guid}\t{names[best] if best < len(names) else best}\n")
        return [test_path, submit_path]


class GlueTask(ClassificationTask):
    """--task=glue/<name>: the GLUE TSV layout in data_dir (reference §6)."""

    def __init__(self, name: str, options: TaskOptions):
        super().__init__(name, options)
        self.glue_name = name.split("/", 1)[1]
        self.metric_task = self.glue_name

    @property
    def is_regression(self) -> bool:
        return self.glue_name == "sts-b"

    def read(self, data_dir: str, split: str) -> Optional[ClassificationData]:
        from pipelines.finetune import glue

        path = glue.glue_file(data_dir, self.glue_name, split)
        if split == "test" and not tf.io.gfile.exists(path):
            return None
        examples, label_names = glue.read_glue(data_dir, self.glue_name, split)
        label_names = self._labels_for(examples, label_names)
        return self._remember_labels(from_text_examples(examples, label_names, self.is_regression))


class CsvTask(ClassificationTask):
    """--task=csv: data_dir/train.csv, dev.csv[, test.csv] (or .tsv/.jsonl) with named columns."""

    @property
    def is_regression(self) -> bool:
        return self.options.regression

    def __init__(self, name: str, options: TaskOptions):
        super().__init__(name, options)
        self._table = None

    def read(self, data_dir: str, split: str) -> Optional[ClassificationData]:
        from pipelines.finetune import tabular

        o = self.options
        columns = dict(text_column=o.text_column, text_b_column=o.text_b_column, label_column=o.label_column,
                       regression=o.regression)
        if self.model_label_names is not None:  # evaluation only: this split, the model's labels
            examples = tabular.read_split(data_dir, split, self.model_label_names, **columns)
            if examples is None:
                return None
            return from_text_examples(examples, self.model_label_names, self.is_regression)
        if self._table is None:  # one read checks every split's labels against train's
            self._table = tabular.read_tabular_task(data_dir, **columns)
        examples = getattr(self._table, split)
        if examples is None:
            return None
        return self._remember_labels(from_text_examples(examples, self._table.label_names, self.is_regression))
