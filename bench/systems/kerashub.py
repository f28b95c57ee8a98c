"""keras-hub (TensorFlow backend): AlbertMaskedLM, AlbertBackbone, and its
text path (AlbertTokenizer on the SentencePiece proto + preprocessor).

AlbertMaskedLM has no sentence-order head: its training step is the MLM loss
alone (the SOP head is 2*H FLOPs, nothing next to the rest).
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from typing import Dict, List  # noqa: E402

import tensorflow as tf  # noqa: E402

from bench.systems import common  # noqa: E402


def _policy(precision: str) -> str:
    return {"float32": "float32", "bfloat16": "mixed_bfloat16"}[precision]


def _backbone(precision: str, vocab_size: int = common.ALBERT_BASE["vocab_size"]):
    import keras_hub

    s = common.ALBERT_BASE
    return keras_hub.models.AlbertBackbone(
        vocabulary_size=vocab_size, num_layers=s["num_hidden_layers"],
        num_heads=s["num_attention_heads"], embedding_dim=s["embedding_size"],
        hidden_dim=s["hidden_size"], intermediate_dim=s["intermediate_size"],
        num_groups=1, num_inner_repetitions=1, dropout=0.0,
        max_sequence_length=s["max_position_embeddings"], num_segments=s["type_vocab_size"],
        dtype=_policy(precision))


def _inputs(ex) -> Dict[str, tf.Tensor]:
    return {"token_ids": tf.constant(ex["input_ids"]), "segment_ids": tf.constant(ex["segment_ids"]),
            "padding_mask": tf.constant(ex["input_mask"].astype(bool))}


def train_fit(precision: str, xla: bool, batch: int, seq: int, warmup: int, steps: int) -> Dict[str, float]:
    """AlbertMaskedLM.fit with albert-tf's LAMB (the same optimizer as ours)."""
    import keras
    import keras_hub

    from bench.systems import ours

    model = keras_hub.models.AlbertMaskedLM(_backbone(precision), preprocessor=None)
    model.compile(optimizer=ours._optimization(batch).create_optimizer(),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  weighted_metrics=[], jit_compile=xla)
    ex = common.synthetic_pretraining_batch(batch, seq, common.PREDICTIONS_PER_SEQ,
                                            common.ALBERT_BASE["vocab_size"])
    x = _inputs(ex)
    x["mask_positions"] = tf.constant(ex["masked_lm_positions"])
    dataset = tf.data.Dataset.from_tensors(
        (x, tf.constant(ex["masked_lm_ids"]), tf.constant(ex["masked_lm_weights"]))).repeat()
    return ours._fit_timed(model, dataset, batch, warmup, steps, keras)


def infer(precision: str, xla: bool, batch: int, seq: int, warmup: int, steps: int) -> Dict[str, float]:
    """AlbertBackbone forward pass (pooled output) in a tf.function."""
    backbone = _backbone(precision)
    x = _inputs(common.synthetic_pretraining_batch(batch, seq, 1, common.ALBERT_BASE["vocab_size"]))
    forward = tf.function(lambda inputs: backbone(inputs, training=False)["pooled_output"], jit_compile=xla)
    times = common.timed_calls(lambda: forward(x).numpy(), warmup, steps)
    return common.per_second(batch, times)


def text(precision: str, spm_path: str, sentences: List[str], warmup: int, steps: int) -> Dict[str, float]:
    """keras-hub's own text path: AlbertTokenizer + AlbertTextClassifierPreprocessor
    (which pads to its sequence_length) + the backbone."""
    import keras_hub

    tokenizer = keras_hub.models.AlbertTokenizer(proto=spm_path)
    preprocessor = keras_hub.models.AlbertTextClassifierPreprocessor(
        tokenizer, sequence_length=common.TEXT_MAX_SEQ_LENGTH)
    backbone = _backbone(precision, vocab_size=tokenizer.vocabulary_size())
    batch = tf.constant(sentences)

    @tf.function
    def forward(texts):
        return backbone(preprocessor(texts), training=False)["pooled_output"]

    padded = preprocessor(batch)["token_ids"].shape[1]
    times = common.timed_calls(lambda: forward(batch).numpy(), warmup, steps)
    result = common.per_second(len(sentences), times)
    result["padded_length"] = int(padded)
    return result
