"""Fine-tuning on real text: sentence classification (2 labels) through each
system's own text path, training examples/s.

Every system trains on batches of one pool of thousands of real sentences of
5-60 words (`common.write_text_pool`, the same file for every system) with
the same seeded random labels: the pool's first `warmup` batches untimed,
then the next `steps` batches timed as one pass; the figure is
examples / seconds of the pass (batch lengths differ, so not a median step).
Two batch orders (`common.read_text_pool`): "grouped" (batches of similar
length, Hugging Face's `group_by_length` sampler: each system's best normal
use) and "random" (the "same padding" comparison). ALBERT-base shape with the
text benchmarks' 8000-piece vocabulary, random weights; mixed bfloat16
(Keras `mixed_bfloat16`, `torch.autocast`).

* ours, `feed="fit"`: `AlbertClassifier` with its in-graph preprocessor (pads
  each batch to its longest row), `albert_tf.optimizers.adamw`, `model.fit`
  on the pool's batches of `order`;
* ours, `feed="finetune"`: the same model fed as albert-finetune feeds it
  (`ClassificationTask.train_dataset` over the whole pool: its own batches
  of similar length);
* keras-hub: `AlbertTextClassifier`, inputs from `AlbertTextClassifierPreprocessor`
  in the tf.data pipeline, padded to the batch's bucket length (padding="bucket":
  pre-packed batches) or to its longest row (padding="longest"); Keras AdamW, `fit`;
* Hugging Face: `AlbertForSequenceClassification`, its AlbertTokenizer from
  the same SentencePiece model (padding="longest") in every step, torch AdamW;
  with `compile=True` the model through `torch.compile(dynamic=True)` (as the
  Trainer's `torch_compile=True`: the model, not the optimizer; dynamic from the
  start, so batches of other lengths reuse one compiled graph, where automatic
  dynamic shapes would compile a second time on the second length).

Threads: each function sets and reports its framework's (`threads.uses`).

Each result carries the padded and real tokens per example and the training
GFLOP per example at the padded lengths (`common.forward_flops` x 3), so the
gain of not computing on padding can be predicted from the batches alone.
"""

from __future__ import annotations

import os
import time
from typing import Dict, List, Sequence, Tuple

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

from bench.systems import common, threads  # noqa: E402

NUM_CLASSES = 2
LEARNING_RATE = 2e-5
# "tiny" is the smoke test's shape (seconds, not minutes); "base" is measured.
SHAPES = {
    "base": dict(common.ALBERT_BASE, vocab_size=common.TEXT_VOCAB_SIZE),
    "tiny": dict(common.ALBERT_BASE, vocab_size=common.TEXT_VOCAB_SIZE, embedding_size=16, hidden_size=32,
                 num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}


# ------------------------------------------------------------------- data
def pool(pool_file: str, order: str, warmup: int, steps: int):
    """(sentences, seeded 0/1 labels of the whole pool, warm-up batches, timed batches)."""
    sentences, warm, timed = common.read_text_pool(pool_file, order, warmup, steps)
    labels = np.random.default_rng(0).integers(0, NUM_CLASSES, size=len(sentences)).astype("int32")
    return sentences, labels, [np.asarray(b) for b in warm], [np.asarray(b) for b in timed]


def batch_costs(shape: Dict[str, int], batches: Sequence[Sequence[int]]) -> Dict[str, float]:
    """Per example: padded tokens, real tokens and training GFLOP at the padded lengths.

    `batches` holds each batch's real lengths (tokens with [CLS]/[SEP]).

    Example:
    >>> costs = batch_costs(SHAPES["base"], [[10, 30], [20, 20]])
    >>> costs["padded_tokens"], costs["real_tokens"]
    (25.0, 20.0)
    """
    rows = sum(len(b) for b in batches)
    padded = sum(len(b) * max(b) for b in batches)
    flops = sum(len(b) * 3 * common.forward_flops(shape, max(b), None) for b in batches)
    return {"padded_tokens": padded / rows, "real_tokens": sum(sum(b) for b in batches) / rows,
            "gflop_per_example": flops / rows / 1e9}


def _result(examples: int, seconds: float, shape, lengths: Sequence[Sequence[int]],
            cpu_seconds: float) -> Dict[str, float]:
    # CPU time of the pass (all threads) is steadier than wall time on a shared machine.
    out = {"per_s": examples / seconds, "seconds": seconds, "examples": examples,
           "cpu_s": cpu_seconds, "per_cpu_s": examples / cpu_seconds}
    out.update(batch_costs(shape, lengths))
    return out


# ------------------------------------------------------------------- ours
def _keras_pass_seconds(model, dataset, warmup: int, steps: int) -> Tuple[float, float]:
    """Wall and CPU seconds from the start of the first timed batch to the end of the last."""
    import keras

    stamps: Dict[str, List[Tuple[float, float]]] = {"begin": [], "end": []}

    class Stamp(keras.callbacks.Callback):
        def on_train_batch_begin(self, step, logs=None):
            stamps["begin"].append((time.perf_counter(), time.process_time()))

        def on_train_batch_end(self, step, logs=None):
            stamps["end"].append((time.perf_counter(), time.process_time()))

    model.fit(dataset, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[Stamp()])
    if len(stamps["end"]) != warmup + steps:
        raise RuntimeError(f"fit ran {len(stamps['end'])} steps, expected {warmup + steps}.")
    (wall_end, cpu_end), (wall_begin, cpu_begin) = stamps["end"][-1], stamps["begin"][warmup]
    return wall_end - wall_begin, cpu_end - cpu_begin


@threads.uses("tensorflow")
def ours(precision: str, spm_path: str, pool_file: str, batch: int, warmup: int, steps: int,
         feed: str = "fit", order: str = common.RANDOM, shape: str = "base") -> Dict[str, float]:
    """albert-tf's AlbertClassifier (strings in) trained by `fit`; see the module docstring."""
    import tensorflow as tf

    import albert_tf
    from albert_tf import runtime
    from albert_tf.tasks.base import TaskOptions
    from albert_tf.tasks.classification import ClassificationData, CsvTask, packed_lengths

    texts, labels, warm, timed = pool(pool_file, order, warmup, steps)
    dims = SHAPES[shape]
    preprocessor = albert_tf.AlbertTextPreprocessor(spm_path, max_seq_length=common.TEXT_MAX_SEQ_LENGTH)
    config = albert_tf.AlbertConfig(**dict(dims, vocab_size=preprocessor.vocab_size))
    policy = runtime.dtype_policy_name(runtime.resolve_mixed_precision(precision))
    model = albert_tf.AlbertClassifier(config, NUM_CLASSES, preprocessor=preprocessor, dtype=policy)
    model.compile(optimizer=albert_tf.optimizers.adamw(LEARNING_RATE, num_train_steps=10 ** 6, num_warmup_steps=0))
    data = ClassificationData(texts, None, labels, ["0", "1"], [str(i) for i in range(len(texts))])
    options = TaskOptions(spm_model_file=spm_path, max_seq_length=common.TEXT_MAX_SEQ_LENGTH)
    lengths = packed_lengths(data, options)
    if feed == "fit":
        strings = tf.constant(texts)
        idx = tf.constant(np.stack(warm + timed))
        dataset = tf.data.Dataset.from_tensor_slices(idx).map(lambda i: (tf.gather(strings, i), tf.gather(labels, i)))
        timed_lengths = [lengths[b].tolist() for b in timed]
    elif feed == "finetune":
        task = CsvTask("csv", options)
        # Warm-up batches from another seed; then exactly the first batches of seed 0.
        dataset = task.train_dataset(data, batch, seed=1).take(warmup).concatenate(
            task.train_dataset(data, batch, seed=0).take(steps))
        index = {t: i for i, t in enumerate(texts)}
        timed_lengths = [[int(lengths[index[t.decode()]]) for t in x]
                         for x, _ in task.train_dataset(data, batch, seed=0).take(steps).as_numpy_iterator()]
    else:
        raise ValueError(f"feed must be 'fit' or 'finetune', got {feed!r}.")
    seconds, cpu_seconds = _keras_pass_seconds(model, dataset.prefetch(2), warmup, steps)
    return _result(sum(len(b) for b in timed_lengths), seconds, dims, timed_lengths, cpu_seconds)


# -------------------------------------------------------------- keras-hub
@threads.uses("tensorflow")
def kerashub(precision: str, spm_path: str, pool_file: str, batch: int, warmup: int, steps: int,
             order: str = common.GROUPED, padding: str = "bucket", shape: str = "base") -> Dict[str, float]:
    """keras-hub's AlbertTextClassifier trained by `fit` on inputs its
    AlbertTextClassifierPreprocessor makes in the tf.data pipeline, each batch padded
    to its bucket's length (padding="bucket") or to its longest row ("longest")."""
    import keras
    import keras_hub
    import tensorflow as tf

    from bench.systems import kerashub as kh

    texts, labels, warm, timed = pool(pool_file, order, warmup, steps)
    texts = kh.normalized(texts)
    dims = SHAPES[shape]
    tokenizer = keras_hub.models.AlbertTokenizer(proto=spm_path)
    preprocessor = keras_hub.models.AlbertTextClassifierPreprocessor(
        tokenizer, sequence_length=common.TEXT_MAX_SEQ_LENGTH)
    backbone = keras_hub.models.AlbertBackbone(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=dims["num_hidden_layers"],
        num_heads=dims["num_attention_heads"], embedding_dim=dims["embedding_size"],
        hidden_dim=dims["hidden_size"], intermediate_dim=dims["intermediate_size"], num_groups=1,
        num_inner_repetitions=1, dropout=0.0, max_sequence_length=dims["max_position_embeddings"],
        num_segments=dims["type_vocab_size"], dtype={"float32": "float32", "bfloat16": "mixed_bfloat16"}[precision])
    model = keras_hub.models.AlbertTextClassifier(backbone, NUM_CLASSES, preprocessor=None)
    model.compile(optimizer=keras.optimizers.AdamW(LEARNING_RATE, weight_decay=0.01, global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    padded = kh.batch_lengths(preprocessor, texts, warm + timed, padding)
    strings = tf.constant(texts)
    dataset = tf.data.Dataset.from_tensor_slices((tf.constant(np.stack(warm + timed)), tf.constant(padded))).map(
        lambda i, n: (kh._padded_to(preprocessor, tf.gather(strings, i), n), tf.gather(labels, i)))
    seconds, cpu_seconds = _keras_pass_seconds(model, dataset.prefetch(2), warmup, steps)
    real = preprocessor(strings)["padding_mask"].numpy().sum(axis=1)
    # Costs at the padded lengths, from each batch's padded length (all rows at it).
    result = _result(sum(len(b) for b in timed), seconds, dims,
                     [[n] * len(b) for b, n in zip(timed, padded[len(warm):])], cpu_seconds)
    result["real_tokens"] = float(sum(real[b].sum() for b in timed)) / sum(len(b) for b in timed)
    return result


# ---------------------------------------------------------- Hugging Face
@threads.uses("torch")
def hf(precision: str, spm_path: str, pool_file: str, batch: int, warmup: int, steps: int,
       order: str = common.GROUPED, shape: str = "base", compile: bool = False) -> Dict[str, float]:
    """AlbertForSequenceClassification, AlbertTokenizer (padding="longest") each step, torch AdamW;
    compile: the model through torch.compile."""
    import torch
    import transformers

    from bench.systems import hf as hf_common

    texts, labels, warm, timed = pool(pool_file, order, warmup, steps)
    dims = SHAPES[shape]
    torch.manual_seed(0)
    tokenizer = hf_common._tokenizer(spm_path)
    config = transformers.AlbertConfig(
        vocab_size=len(tokenizer), embedding_size=dims["embedding_size"], hidden_size=dims["hidden_size"],
        num_hidden_layers=dims["num_hidden_layers"], num_attention_heads=dims["num_attention_heads"],
        intermediate_size=dims["intermediate_size"], hidden_act="gelu_new", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.1,
        max_position_embeddings=dims["max_position_embeddings"], type_vocab_size=dims["type_vocab_size"],
        num_hidden_groups=1, inner_group_num=1, num_labels=NUM_CLASSES,
        # What the model sets on its first call: set before, so that torch.compile's guard on it holds.
        problem_type="single_label_classification")
    model = transformers.AlbertForSequenceClassification(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    forward = torch.compile(model, dynamic=True) if compile else model
    label_tensor = torch.from_numpy(labels).long()

    def step(index):
        enc = tokenizer([texts[i] for i in index], padding="longest", truncation=True,
                        max_length=common.TEXT_MAX_SEQ_LENGTH, return_tensors="pt")
        with hf_common._autocast(precision):
            loss = forward(**enc, labels=label_tensor[torch.from_numpy(index).long()]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    for index in warm:
        step(index)
    start, cpu_start = time.perf_counter(), time.process_time()
    for index in timed:
        step(index)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    mask = tokenizer(texts, truncation=True, max_length=common.TEXT_MAX_SEQ_LENGTH)["input_ids"]
    return _result(sum(len(b) for b in timed), seconds, dims, [[len(mask[i]) for i in b] for b in timed],
                   cpu_seconds)
