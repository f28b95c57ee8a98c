"""SQuAD v1.1 / v2.0: sliding-window id features in, official predictions.json out.

The reader (`pipelines.finetune.squad`) tokenizes in Python with the model's
SentencePiece model, aligns answers to pieces and cuts windows
(`--doc_stride`, `--max_query_length`); `AlbertSpanQA` predicts start/end
logits (plus the no-answer logit for v2); post-processing maps the n-best
spans back to substrings of the original contexts. Dev metrics are the
official scripts' (`albert_tf.metrics`): exact_match/f1 (v1.1), exact/f1 with
HasAns/NoAns and the best no-answer threshold (v2.0), in percent. The best
checkpoint is chosen by f1.

Files: data_dir/train.json, dev.json[, test.json] (or the official names
train-v1.1.json, dev-v2.0.json, ...).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional

import keras
import numpy as np
import tensorflow as tf

from albert_tf.tasks.base import FinetuneTask, TaskOptions, pretrained_or_random, predict_in_batches


@dataclasses.dataclass
class SquadData:
    """The questions of one split and their window features."""

    examples: List[Any]
    features: Any


class SquadTask(FinetuneTask):
    """--task=squad_v1 / squad_v2."""

    selection_metric = "f1"

    def __init__(self, name: str, options: TaskOptions):
        super().__init__(name, options)
        self.version_2 = name == "squad_v2"
        self._text = None

    def _piece_text(self):
        if self._text is None:
            from pipelines.finetune.sp_text import PieceText
            from pipelines.tokenizer import SentencePieceVocab

            if not self.options.spm_model_file:
                raise ValueError(f"--task={self.name} needs the SentencePiece model (--spm_model_file).")
            self._text = PieceText(SentencePieceVocab.from_file(self.options.spm_model_file),
                                   self.options.do_lower_case)
        return self._text

    def read(self, data_dir: str, split: str) -> Optional[SquadData]:
        from pipelines.finetune import squad

        path = squad.find_squad_file(data_dir, split, self.version_2)
        if path is None:
            if split == "test":
                return None
            version = "v2.0" if self.version_2 else "v1.1"
            raise FileNotFoundError(f"No SQuAD {split} file in {data_dir!r}: expected {split}.json or "
                                    f"{split}-{version}.json.")
        training = split == "train"
        examples = squad.read_squad_examples(path, is_training=training)
        o = self.options
        features = squad.convert_examples_to_features(examples, self._piece_text(), o.max_seq_length, o.doc_stride,
                                                      o.max_query_length, is_training=training)
        if len(features) == 0:
            raise ValueError(f"{path}: no usable example (every answer failed to align with the context).")
        return SquadData(examples, features)

    def num_examples(self, data: SquadData) -> int:
        return len(data.features)

    def train_dataset(self, data: SquadData, batch_size: int, seed: int) -> tf.data.Dataset:
        f = data.features
        ds = tf.data.Dataset.from_tensor_slices((f.model_inputs(), f.labels(self.version_2)))
        ds = ds.shuffle(len(f), seed=seed, reshuffle_each_iteration=True).repeat()
        return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    def build_model(self, config, init_checkpoint, train_data) -> keras.Model:
        from albert_tf.models import AlbertSpanQA

        return pretrained_or_random(AlbertSpanQA, config, init_checkpoint, self.options,
                                    version_2=self.version_2, max_query_length=self.options.max_query_length,
                                    dropout_rate=self.options.dropout_rate)

    def _postprocess(self, model: keras.Model, data: SquadData, batch_size: int):
        from pipelines.finetune import squad

        outputs = predict_in_batches(model, data.features.model_inputs(), batch_size)
        outputs = {k: np.asarray(v) for k, v in outputs.items()}
        return squad.postprocess_predictions(data.examples, data.features, outputs,
                                             n_best_size=self.options.n_best_size,
                                             max_answer_length=self.options.max_answer_length,
                                             version_2=self.version_2)

    def evaluate(self, model: keras.Model, data: SquadData, batch_size: int) -> Dict[str, float]:
        from albert_tf import metrics

        result = self._postprocess(model, data, batch_size)
        gold = {e.qas_id: list(e.gold_answers) for e in data.examples}
        if self.version_2:
            scores = metrics.squad_v2_scores(gold, result.predictions, na_probs=result.null_odds)
        else:
            if any(not answers for answers in gold.values()):
                missing = next(q for q, a in gold.items() if not a)
                raise ValueError(f"SQuAD v1.1 dev question {missing!r} has no gold answer to score against.")
            scores = metrics.squad_v1_scores(gold, result.predictions)
        return {k: float(v) for k, v in scores.items()}

    def predict(self, model: keras.Model, data: SquadData, batch_size: int, output_dir: str) -> List[str]:
        from pipelines.finetune import squad

        paths = squad.write_predictions(self._postprocess(model, data, batch_size), output_dir)
        return [paths[k] for k in sorted(paths)]
