"""keras-hub (TensorFlow backend): AlbertMaskedLM, AlbertBackbone, and its
text path (AlbertTokenizer on the SentencePiece proto + preprocessor).

AlbertMaskedLM has no sentence-order head: its training step is the MLM loss
alone (the SOP head is 2*H FLOPs, nothing next to the rest). `shape`: "base" or
"tiny" (`common.SHAPES`). Threads: `threads.uses("tensorflow")`.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from typing import Dict, List  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.systems import common, threads  # noqa: E402


def _policy(precision: str) -> str:
    return {"float32": "float32", "bfloat16": "mixed_bfloat16"}[precision]


def _backbone(precision: str, vocab_size: int = common.ALBERT_BASE["vocab_size"], shape: str = "base"):
    import keras_hub

    s = common.shape_dims(shape)
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


@threads.uses("tensorflow")
def train_fit(precision: str, xla: bool, batch: int, seq: int, warmup: int, steps: int,
              shape: str = "base") -> Dict[str, float]:
    """AlbertMaskedLM.fit with albert-tf's LAMB (the same optimizer as ours)."""
    import keras
    import keras_hub

    from bench.systems import ours

    model = keras_hub.models.AlbertMaskedLM(_backbone(precision, shape=shape), preprocessor=None)
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


@threads.uses("tensorflow")
def infer(precision: str, xla: bool, batch: int, seq: int, warmup: int, steps: int,
          shape: str = "base") -> Dict[str, float]:
    """AlbertBackbone forward pass (pooled output) in a tf.function."""
    backbone = _backbone(precision, shape=shape)
    x = _inputs(common.synthetic_pretraining_batch(batch, seq, 1, common.ALBERT_BASE["vocab_size"]))
    forward = tf.function(lambda inputs: backbone(inputs, training=False)["pooled_output"], jit_compile=xla)
    times = common.timed_calls(lambda: forward(x).numpy(), warmup, steps)
    return common.per_second(batch, times)


def _padded_to(preprocessor, texts, length):
    """keras-hub's packed inputs for `texts`, padded to `length` (>= every row's
    length): packed at 128, then cut, which equals packing at `length`."""
    return {k: v[:, :length] for k, v in preprocessor(texts).items()}


def normalized(sentences: List[str]) -> List[str]:
    """The original's normalisation (lowercase, accents stripped), before keras-hub's tokenizer.

    keras-hub's AlbertTokenizer does not lowercase, and the vocabulary (as the
    original's) is lowercased: without this, keras-hub tokenizes the same text
    into more pieces and does more work than the other systems.
    """
    from pipelines.tokenizer import preprocess_text_py

    return [preprocess_text_py(s, True) for s in sentences]


def batch_lengths(preprocessor, sentences, batches, padding: str) -> List[int]:
    """Each batch's padded length: its longest row ("longest") or that rounded up
    to a bucket boundary ("bucket", `common.bucket_length`)."""
    real = preprocessor(tf.constant(sentences))["padding_mask"].numpy().sum(axis=1)
    if padding not in ("longest", "bucket"):
        raise ValueError(f"padding must be 'longest' or 'bucket', got {padding!r}.")
    longest = [int(real[b].max()) for b in batches]
    return longest if padding == "longest" else [common.bucket_length(n) for n in longest]


def _sorted_forward(backbone, preprocessor, rows: int, sort_rows: int):
    """A tf.function: texts [rows] -> pooled outputs, the rows sorted by packed length and run
    `sort_rows` at a time, each chunk cut to its own longest row, then put back in input order
    (as `common.length_sorted_chunks`)."""
    @tf.function
    def forward(texts):
        packed = preprocessor(texts)
        lengths = tf.reduce_sum(tf.cast(packed["padding_mask"], tf.int32), axis=1)
        order = tf.argsort(lengths, stable=True)
        pooled = []
        for start in range(0, rows, sort_rows):
            index = order[start:start + sort_rows]
            longest = tf.reduce_max(tf.gather(lengths, index))
            chunk = {k: tf.gather(v, index)[:, :longest] for k, v in packed.items()}
            pooled.append(backbone(chunk, training=False)["pooled_output"])
        pooled = tf.concat(pooled, axis=0)
        return tf.scatter_nd(order[:, None], pooled, tf.shape(pooled))
    return forward


@threads.uses("tensorflow")
def text(precision: str, spm_path: str, pool_file: str, feed: str, warmup: int, steps: int,
         padding: str = "bucket", sort_rows: int = 0, shape: str = "base") -> Dict[str, float]:
    """keras-hub's text path: AlbertTokenizer + AlbertTextClassifierPreprocessor + the
    backbone, each batch padded to its bucket's length (padding="bucket", pre-packed
    batches) or to its longest row (padding="longest"); with sort_rows, each batch's rows
    sorted by length and run `sort_rows` at a time, each chunk padded to its longest."""
    import keras_hub

    tokenizer = keras_hub.models.AlbertTokenizer(proto=spm_path)
    preprocessor = keras_hub.models.AlbertTextClassifierPreprocessor(
        tokenizer, sequence_length=common.TEXT_MAX_SEQ_LENGTH)
    backbone = _backbone(precision, vocab_size=tokenizer.vocabulary_size(), shape=shape)
    sentences, warm, timed = common.read_text_pool(pool_file, feed, warmup, steps)
    sentences = normalized(sentences)
    real = preprocessor(tf.constant(sentences))["padding_mask"].numpy().sum(axis=1)
    if sort_rows:
        forward = _sorted_forward(backbone, preprocessor, len(timed[0]), int(sort_rows))
        calls = [tf.constant([sentences[i] for i in b]) for b in warm + timed]
        times = common.timed_pass(lambda texts: forward(texts).numpy(), calls[:len(warm)], calls[len(warm):])
        masks = [np.arange(real[np.asarray(b)[c]].max())[None, :] < real[np.asarray(b)[c]][:, None]
                 for b in timed for c in common.length_sorted_chunks(real[b], int(sort_rows))]
        return common.text_pass_result(times, masks)
    lengths = batch_lengths(preprocessor, sentences, warm + timed, padding)

    @tf.function
    def padded_forward(texts, length):
        return backbone(_padded_to(preprocessor, texts, length), training=False)["pooled_output"]

    calls = [(tf.constant([sentences[i] for i in b]), tf.constant(n)) for b, n in zip(warm + timed, lengths)]
    times = common.timed_pass(lambda call: padded_forward(*call).numpy(), calls[:len(warm)], calls[len(warm):])
    # Masks at the padded length of each batch: real tokens first, then padding.
    masks = [np.arange(n)[None, :] < real[b][:, None] for b, n in zip(timed, lengths[len(warm):])]
    return common.text_pass_result(times, masks)
