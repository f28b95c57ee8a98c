"""Readers of the fine-tuning tasks: GLUE, any CSV/TSV/JSONL table, SQuAD v1.1/v2.0,
RACE and CoNLL-style tagging.

Classification readers return raw strings, label names and a tf.data builder
(the task models tokenize in the graph); the SQuAD and tagging readers build id
features in Python with SentencePiece and keep what post-processing needs.
"""
