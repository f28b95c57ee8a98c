"""ALBERT pretraining data as TensorFlow graph ops (tf.data).

Public API:
    train_sentencepiece: a SentencePiece vocabulary with the original settings.
    create_pretraining_data / PretrainingDataConfig: text files -> TFRecord shards
        (SOP/NSP, n-gram masking).
    pretraining_dataset: the training reader (static or dynamic masking).
    feature_spec / parse_examples / serialize_examples: the record format.
    mask_tokens / MaskingConfig: the n-gram masking (shared by both paths).

Names are imported on first use (PEP 562): `import pipelines` does not start
TensorFlow, so the binaries can keep its start-up log quiet.
"""

import importlib

# Public name -> the module that defines it.
_EXPORTS = {
    "PretrainingDataConfig": "pipelines.create",
    "PretrainingDataSummary": "pipelines.create",
    "create_pretraining_data": "pipelines.create",
    "shard_path": "pipelines.create",
    "MaskingConfig": "pipelines.masking",
    "mask_tokens": "pipelines.masking",
    "FEATURE_NAMES": "pipelines.tfrecords",
    "feature_spec": "pipelines.tfrecords",
    "parse_examples": "pipelines.tfrecords",
    "pretraining_dataset": "pipelines.tfrecords",
    "serialize_examples": "pipelines.tfrecords",
    "SentencePieceVocab": "pipelines.tokenizer",
    "train_sentencepiece": "pipelines.tokenizer",
}

__all__ = sorted(_EXPORTS) + ["FEATURE_SPEC"]


def __getattr__(name):
    if name == "FEATURE_SPEC":  # the original run_pretraining parser's spec at the README's settings
        value = __getattr__("feature_spec")(512, 20)
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
