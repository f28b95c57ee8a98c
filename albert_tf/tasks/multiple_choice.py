"""RACE-style multiple choice: context + N choice texts in, the right choice out.

The reader (`pipelines.finetune.race`) builds each choice's qa text as the
original (`question.replace("_", option)` or `question + " " + option`);
`AlbertMultipleChoice` packs `[CLS] context [SEP] qa [SEP]` per choice inside
the graph (qa keeps its last `--max_qa_length` pieces). Metric: accuracy,
overall and per level (middle/high). Prediction writes race_predictions.tsv:
`id`, `level`, the predicted letter and the probability of each choice.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import keras
import numpy as np

from albert_tf.tasks.base import FinetuneTask, pretrained_or_random, predict_in_batches
from albert_tf.tasks.classification import cross_entropy
from pipelines.fileio import atomic_write
from pipelines.finetune.common import softmax

LETTERS = "ABCDEFGHIJ"


def _inputs(examples) -> Dict[str, np.ndarray]:
    return {"text": np.asarray([e.context for e in examples], dtype=object),
            "choices": np.asarray([list(e.choices) for e in examples], dtype=object)}


class RaceTask(FinetuneTask):
    """--task=race: data_dir/RACE/{train,dev,test}/{middle,high}/ (all.txt or one record per file)."""

    selection_metric = "accuracy"

    def read(self, data_dir: str, split: str) -> Optional[List]:
        from pipelines.finetune import race

        if split == "test" and not any(race.race_files(data_dir, split, level) for level in race.LEVELS):
            return None
        return race.read_race(data_dir, split)

    def num_examples(self, data) -> int:
        return len(data)

    def train_items(self, data):
        missing = [e for e in data if e.label is None]
        if missing:
            raise ValueError(f"{missing[0].source}: {missing[0].example_id!r} has no answer.")
        return _inputs(data), np.asarray([e.label for e in data], np.int32)

    def build_model(self, config, init_checkpoint, train_data) -> keras.Model:
        from albert_tf.models import AlbertMultipleChoice

        return pretrained_or_random(AlbertMultipleChoice, config, init_checkpoint, self.options,
                                    num_choices=len(train_data[0].choices),
                                    max_qa_length=self.options.max_qa_length,
                                    dropout_rate=self.options.dropout_rate)

    def compile_metrics(self):
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def _logits(self, model, data, batch_size) -> np.ndarray:
        return np.asarray(predict_in_batches(model, _inputs(data), batch_size, self.options), np.float64)

    def evaluate(self, model: keras.Model, data, batch_size: int) -> Dict[str, float]:
        from albert_tf import metrics

        if any(e.label is None for e in data):
            raise ValueError(f"{data[0].source}: the dev split has questions without answers.")
        logits = self._logits(model, data, batch_size)
        labels = np.asarray([e.label for e in data])
        results = metrics.race_accuracy(labels, logits.argmax(-1), [e.level for e in data])
        results["eval_loss"] = cross_entropy(logits, labels)
        results["num_examples"] = len(data)
        return {k: (int(v) if k == "num_examples" else float(v)) for k, v in results.items()}

    def predict(self, model: keras.Model, data, batch_size: int, output_dir: str) -> List[str]:
        probs = softmax(self._logits(model, data, batch_size))
        path = os.path.join(output_dir, "race_predictions.tsv")
        with atomic_write(path) as f:
            f.write("id\tlevel\tprediction\t" + "\t".join(f"p_{LETTERS[i]}" for i in range(probs.shape[1])) + "\n")
            for example, row in zip(data, probs):
                f.write(f"{example.example_id}\t{example.level}\t{LETTERS[int(row.argmax())]}\t"
                        + "\t".join(f"{p:.6f}" for p in row) + "\n")
        return [path]
