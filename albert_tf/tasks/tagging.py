"""Token tagging (NER, chunking, POS) on CoNLL-style files.

The reader (`pipelines.finetune.tagging`) cuts each word into SentencePiece
pieces in Python; the first piece of a word carries its tag, the other
positions carry -1 (ignored by `AlbertTokenClassifier`'s loss). Predictions
are read back at each word's first piece. Metrics: token accuracy and
entity-level precision/recall/F1 (`albert_tf.metrics.tagging_scores`,
conlleval rules); the best checkpoint is chosen by f1. Prediction writes
tagging_predictions.txt: `word<TAB>tag` lines, a blank line between sentences.

Files: data_dir/train.txt, dev.txt[, test.txt] (or .conll), "word ... TAG" per
line; the tag set is learned from train.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional

import keras
import numpy as np

from albert_tf.tasks.base import FinetuneTask, TaskOptions, pretrained_or_random, predict_in_batches
from pipelines.fileio import atomic_write


@dataclasses.dataclass
class TaggingData:
    """The sentences of one split and their piece features."""

    sentences: List[Any]
    features: Any


class TaggingTask(FinetuneTask):
    """--task=tagging."""

    selection_metric = "f1"

    def __init__(self, name: str, options: TaskOptions):
        super().__init__(name, options)
        self.tag_names: Optional[List[str]] = None
        self._text = None

    def adopt_saved_model(self, task_config: Dict[str, Any]) -> None:
        if task_config.get("tag_names"):
            self.tag_names = list(task_config["tag_names"])

    def _piece_text(self):
        if self._text is None:
            from pipelines.finetune.sp_text import PieceText
            from pipelines.tokenizer import SentencePieceVocab

            self._text = PieceText(SentencePieceVocab.from_file(self.options.spm_model_file),
                                   self.options.do_lower_case)
        return self._text

    def read(self, data_dir: str, split: str) -> Optional[TaggingData]:
        from pipelines.finetune import tagging

        path = tagging.find_conll_file(data_dir, split)
        if path is None:
            if split == "test":
                return None
            raise FileNotFoundError(f"No tagging {split} file in {data_dir!r}: expected {split}.txt or "
                                    f"{split}.conll.")
        sentences = tagging.read_conll(path)
        if split == "train":
            self.tag_names = tagging.learn_tag_names(sentences)
        if self.tag_names is None:
            raise ValueError(f"{path}: the tag set is unknown (it comes from train.txt or the saved model).")
        features = tagging.convert_sentences_to_features(sentences, self._piece_text(), self.tag_names,
                                                         self.options.max_seq_length)
        return TaggingData(sentences, features)

    def num_examples(self, data: TaggingData) -> int:
        return len(data.features)

    def train_items(self, data: TaggingData):
        return data.features.model_inputs(), data.features.label_ids

    def build_model(self, config, init_checkpoint, train_data) -> keras.Model:
        from albert_tf.models import AlbertTokenClassifier

        return pretrained_or_random(AlbertTokenClassifier, config, init_checkpoint, self.options,
                                    num_tags=len(self.tag_names), tag_names=list(self.tag_names),
                                    dropout_rate=self.options.dropout_rate)

    def _word_tags(self, model: keras.Model, data: TaggingData, batch_size: int) -> List[List[str]]:
        logits = np.asarray(predict_in_batches(model, data.features.model_inputs(), batch_size, self.options))
        names = getattr(model, "tag_names", None) or self.tag_names
        return data.features.word_predictions(logits.argmax(-1), names)

    def evaluate(self, model: keras.Model, data: TaggingData, batch_size: int) -> Dict[str, float]:
        from albert_tf import metrics

        if any(s.tags is None for s in data.sentences):
            raise ValueError(f"{data.sentences[0].source}: the dev file has no tags to evaluate against.")
        predicted = self._word_tags(model, data, batch_size)
        results = metrics.tagging_scores([list(s.tags) for s in data.sentences], predicted)
        return {**{k: float(v) for k, v in results.items()}, "num_sentences": len(data.sentences)}

    def predict(self, model: keras.Model, data: TaggingData, batch_size: int, output_dir: str) -> List[str]:
        predicted = self._word_tags(model, data, batch_size)
        path = os.path.join(output_dir, "tagging_predictions.txt")
        with atomic_write(path) as f:
            for sentence, tags in zip(data.sentences, predicted):
                f.write("".join(f"{word}\t{tag}\n" for word, tag in zip(sentence.words, tags)) + "\n")
        return [path]
