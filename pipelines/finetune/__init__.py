"""Readers of the fine-tuning tasks: GLUE, any CSV/TSV/JSONL table, SQuAD v1.1/v2.0,
RACE and CoNLL-style tagging.

Classification readers return raw strings, label names and a tf.data builder
(the task models tokenize in the graph); the SQuAD and tagging readers build id
features in Python with SentencePiece (`PieceText`, the same ids as the graph
tokenizer) and keep what their post-processing needs. Metrics live in
`albert_tf.metrics`.

Modules: common (TextExample, encode_labels, training passes), glue, tabular,
squad, race, tagging, sp_text (PieceText).
"""

from pipelines.finetune.common import TextExample, encode_labels
from pipelines.finetune.glue import GLUE_TASKS, glue_task, read_glue
from pipelines.finetune.race import RaceExample, build_choice, read_race
from pipelines.finetune.sp_text import PieceText
from pipelines.finetune.squad import (SquadExample, SquadFeatures, SquadPredictions,
                                      answers_at_threshold, convert_examples_to_features,
                                      postprocess_predictions,
                                      read_squad_examples, write_predictions)
from pipelines.finetune.tabular import TabularData, read_table, read_tabular_task
from pipelines.finetune.tagging import (TaggedSentence, TaggingFeatures,
                                        convert_sentences_to_features, learn_tag_names,
                                        read_conll)

__all__ = [
    "GLUE_TASKS", "PieceText", "RaceExample", "SquadExample", "SquadFeatures", "SquadPredictions",
    "TabularData", "TaggedSentence", "TaggingFeatures", "TextExample", "answers_at_threshold",
    "build_choice", "convert_examples_to_features", "convert_sentences_to_features",
    "encode_labels", "glue_task", "learn_tag_names", "postprocess_predictions",
    "read_conll", "read_glue", "read_race", "read_squad_examples", "read_table",
    "read_tabular_task", "write_predictions",
]
