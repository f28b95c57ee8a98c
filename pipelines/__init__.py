"""ALBERT pretraining data as TensorFlow graph ops (tf.data).

Public API:
    train_sentencepiece: a SentencePiece vocabulary with the original settings.
    create_pretraining_data / PretrainingDataConfig: text files -> TFRecord shards
        (SOP/NSP, n-gram masking).
    pretraining_dataset: the training reader (static or dynamic masking).
    feature_spec / parse_examples / serialize_examples: the record format.
    mask_tokens / MaskingConfig: the n-gram masking (shared by both paths).
"""

from pipelines.create import PretrainingDataConfig
from pipelines.create import PretrainingDataSummary
from pipelines.create import create_pretraining_data
from pipelines.create import shard_path
from pipelines.masking import MaskingConfig
from pipelines.masking import mask_tokens
from pipelines.tfrecords import FEATURE_NAMES
from pipelines.tfrecords import feature_spec
from pipelines.tfrecords import parse_examples
from pipelines.tfrecords import pretraining_dataset
from pipelines.tfrecords import serialize_examples
from pipelines.tokenizer import SentencePieceVocab
from pipelines.tokenizer import train_sentencepiece

# The original run_pretraining parser's spec at the README's settings.
FEATURE_SPEC = feature_spec(512, 20)

__all__ = [
    "FEATURE_NAMES", "FEATURE_SPEC", "MaskingConfig", "PretrainingDataConfig", "PretrainingDataSummary",
    "SentencePieceVocab", "create_pretraining_data", "feature_spec", "mask_tokens",
    "parse_examples", "pretraining_dataset", "serialize_examples", "shard_path",
    "train_sentencepiece",
]
