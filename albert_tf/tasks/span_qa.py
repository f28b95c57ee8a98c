"""SQuAD v1.1 / v2.0: sliding-window id features in, official predictions.json out.

The reader (`pipelines.finetune.squad`) tokenizes in Python with the model's
SentencePiece model, aligns answers to pieces and cuts windows
(`--doc_stride`, `--max_query_length`); `AlbertSpanQA` predicts start/end
logits (plus the no-answer logit for v2); post-processing maps the n-best
spans back to substrings of the original contexts. Dev metrics are the
official scripts' (`albert_tf.metrics`): exact_match/f1 (v1.1), exact/f1 with
HasAns/NoAns (v2.0), in percent. v2.0 as the original run_squad_v2: the
no-answer threshold is searched on dev over the unthresholded answers, the
answers are scored at it (f1 = best_f1), the best checkpoint is chosen by that
f1, and its threshold is written to task_config.json as
``null_score_diff_threshold``, which prediction (and export) use.

Files: data_dir/train.json, dev.json[, test.json] (or the official names
train-v1.1.json, dev-v2.0.json, ...).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import keras
import numpy as np
import tensorflow as tf

from albert_tf.tasks.base import FinetuneTask, TaskOptions, pretrained_or_random, predict_in_batches
from pipelines.finetune.common import split_file

#: task_config.json key of the v2 null-score threshold chosen on dev (export and serving read it)
THRESHOLD_KEY = "null_score_diff_threshold"


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

        version = "v2.0" if self.version_2 else "v1.1"
        path = split_file(data_dir, f"{split}.json", f"{split}-{version}.json")
        if path is None:
            if split == "test":
                return None
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
        # The original's schedule counts questions (len(train_examples)), not windows.
        return len(data.examples)

    def train_items(self, data: SquadData):
        return data.features.model_inputs(), data.features.labels(self.version_2)

    def build_model(self, config, init_checkpoint, train_data) -> keras.Model:
        from albert_tf.models import AlbertSpanQA

        return pretrained_or_random(AlbertSpanQA, config, init_checkpoint, self.options,
                                    version_2=self.version_2, max_query_length=self.options.max_query_length,
                                    dropout_rate=self.options.dropout_rate, doc_stride=self.options.doc_stride,
                                    max_answer_length=self.options.max_answer_length,
                                    n_best_size=self.options.n_best_size)

    def _postprocess(self, model: keras.Model, data: SquadData, batch_size: int, threshold: float = 0.0):
        from pipelines.finetune import squad

        outputs = predict_in_batches(model, data.features.model_inputs(), batch_size, self.options)
        outputs = {k: np.asarray(v) for k, v in outputs.items()}
        return squad.postprocess_predictions(data.examples, data.features, outputs,
                                             n_best_size=self.options.n_best_size,
                                             max_answer_length=self.options.max_answer_length,
                                             version_2=self.version_2, null_score_diff_threshold=threshold)

    def evaluate(self, model: keras.Model, data: SquadData, batch_size: int) -> Dict[str, float]:
        from albert_tf import metrics

        result = self._postprocess(model, data, batch_size)
        gold = {e.qas_id: list(e.gold_answers) for e in data.examples}
        if self.version_2:
            scores, _ = v2_scores_at_best_threshold(gold, result)
        else:
            if any(not answers for answers in gold.values()):
                missing = next(q for q, a in gold.items() if not a)
                raise ValueError(f"SQuAD v1.1 dev question {missing!r} has no gold answer to score against.")
            scores = metrics.squad_v1_scores(gold, result.predictions)
        return {k: float(v) for k, v in scores.items()}

    def record_selection(self, results: Dict[str, float], output_dir: str) -> None:
        """v2: writes the dev threshold of the saved (best) model into its task_config.json."""
        if self.version_2 and THRESHOLD_KEY in results:
            write_threshold(output_dir, float(results[THRESHOLD_KEY]))

    def predict(self, model: keras.Model, data: SquadData, batch_size: int, output_dir: str) -> List[str]:
        from pipelines.finetune import squad

        threshold = read_threshold(output_dir) if self.version_2 else 0.0
        result = self._postprocess(model, data, batch_size, threshold)
        paths = squad.write_predictions(result, output_dir)
        return [paths[k] for k in sorted(paths)]


def v2_scores_at_best_threshold(gold_answers: Dict[str, List[str]],
                                result) -> Tuple[Dict[str, float], Dict[str, str]]:
    """The original run_squad_v2 evaluation: search the null-score threshold on
    the unthresholded answers, then score the answers at the threshold found.

    Args:
        gold_answers: question id -> gold texts ([] when unanswerable).
        result: `SquadPredictions` (best_non_null and null_odds are used).

    Returns:
        (scores, answers): the official v2 scores of the answers at the
        threshold (so f1 = best_f1) plus best_exact, best_exact_thresh,
        best_f1, best_f1_thresh and null_score_diff_threshold (=
        best_f1_thresh); the answers ("" where the null odds exceed it).

    Example:
    >>> from pipelines.finetune.squad import SquadPredictions
    >>> r = SquadPredictions({}, {"a": "x", "b": "y"}, {"a": -1.0, "b": 2.0}, {})
    >>> scores, answers = v2_scores_at_best_threshold({"a": ["x"], "b": []}, r)
    >>> scores["f1"], scores["null_score_diff_threshold"], answers
    (100.0, -1.0, {'a': 'x', 'b': ''})
    """
    from albert_tf import metrics
    from pipelines.finetune.squad import answers_at_threshold

    search = metrics.squad_v2_scores(gold_answers, result.best_non_null, na_probs=result.null_odds)
    threshold = float(search["best_f1_thresh"])
    answers = answers_at_threshold(result.best_non_null, result.null_odds, threshold)
    scores = metrics.squad_v2_scores(gold_answers, answers)
    for key in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"):
        scores[key] = search[key]
    scores[THRESHOLD_KEY] = threshold
    return scores, answers


def write_threshold(output_dir: str, threshold: float) -> None:
    """Adds ``null_score_diff_threshold`` to output_dir/task_config.json (read by export and serving)."""
    from albert_tf.models.task_io import TASK_CONFIG_FILENAME
    from pipelines.fileio import atomic_write

    from pipelines.fileio import read_json

    path = os.path.join(output_dir, TASK_CONFIG_FILENAME)
    config = read_json(path)
    config[THRESHOLD_KEY] = float(threshold)
    with atomic_write(path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def read_threshold(model_dir: str) -> float:
    """The null_score_diff_threshold a fine-tuned v2 model recorded (0.0 when none)."""
    from albert_tf.models.task_io import TASK_CONFIG_FILENAME

    from pipelines.fileio import read_json

    path = os.path.join(model_dir, TASK_CONFIG_FILENAME)
    if not tf.io.gfile.exists(path):
        return 0.0
    return float(read_json(path).get(THRESHOLD_KEY, 0.0))
