"""SQuAD v1.1 / v2.0: examples, sliding-window id features and the post-processing
back to answer strings, as the original ALBERT `squad_utils`.

One module per step, in the order a run takes them:

- `examples`: `read_squad_examples`, the official JSON -> `SquadExample`s
  (answers are character offsets in the original context).
- `alignment`: `align_paragraph`, the context's SentencePiece pieces and the
  original's banded-LCS character alignment (an example whose alignment covers
  < 80% of the characters is dropped and counted, as the original's "MISMATCH
  DETECTED").
- `features`: `convert_examples_to_features`, windows of
  `[CLS] question [SEP] doc [SEP]` sliding over the pieces with `doc_stride`;
  a training window without the answer (or an impossible question) gets
  start = end = 0, the [CLS] position; `p_mask` is 1 for the question, the
  [SEP]s and padding.
- `predictions`: `postprocess_predictions`, n-best spans per question (top
  `n_best_size` starts x ends per window, `max_answer_length`, the max-context
  check, one entry per distinct text) mapped back to a substring of the
  ORIGINAL context; SQuAD v2 null scores and the null-score-difference
  threshold (`answers_at_threshold`, the one place that rule lives);
  `write_predictions` writes the official predictions.json (plus
  nbest_predictions.json and, for v2, null_odds.json).

The names below are the package's API (`from pipelines.finetune import squad`).

Example:

>>> examples = read_squad_examples("dev-v1.1.json", is_training=False)   # doctest: +SKIP
>>> features = convert_examples_to_features(examples, PieceText(vocab), 384, 128, 64,
...                                         is_training=False)            # doctest: +SKIP
>>> outputs = model.predict(features.model_inputs(), batch_size=32)      # doctest: +SKIP
>>> result = postprocess_predictions(examples, features, outputs)        # doctest: +SKIP
>>> write_predictions(result, "out")                                     # doctest: +SKIP
"""

from pipelines.finetune.squad.alignment import MIN_ALIGNMENT_COVERAGE, ParagraphAlignment, align_paragraph
from pipelines.finetune.squad.examples import SquadExample, read_squad_examples
from pipelines.finetune.squad.features import UNIQUE_ID_BASE, SquadFeatures, convert_examples_to_features
from pipelines.finetune.squad.predictions import (SquadPredictions, answers_at_threshold,
                                                  postprocess_predictions, write_predictions)

__all__ = [
    "MIN_ALIGNMENT_COVERAGE", "ParagraphAlignment", "SquadExample", "SquadFeatures", "SquadPredictions",
    "UNIQUE_ID_BASE", "align_paragraph", "answers_at_threshold", "convert_examples_to_features",
    "postprocess_predictions", "read_squad_examples", "write_predictions",
]
