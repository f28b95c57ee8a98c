"""albert-tf: the custom training step, AlbertPretrainer.fit, the encoder, the
task model's in-graph text path and the exported SavedModel.

`shape` ("base", "tiny": `common.SHAPES`) or a preset names the model; "tiny" is
the smoke plan's. Every function sets and reports TensorFlow's threads
(`threads.uses`)."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from bench.systems import common, threads

# A measurement's shape -> the preset it builds (the tiny shape as `common.TINY`, no dropout).
PRESETS = {"base": "albert_base_v2", "tiny": "tiny"}


def _config(preset: str, vocab_size: int = None, dropout: float = None):
    """The AlbertConfig of a preset ("albert_base_v2", "bert_large", ...) or a shape ("base", "tiny")."""
    import albert_tf

    preset = PRESETS.get(preset, preset)
    overrides = {"vocab_size": vocab_size} if vocab_size else {}
    if dropout is not None:
        overrides.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    if preset == "tiny":
        return albert_tf.AlbertConfig(**dict(common.shape_dims("tiny"), hidden_dropout_prob=0.0,
                                             attention_probs_dropout_prob=0.0, **overrides))
    return albert_tf.AlbertConfig.from_preset(preset, **overrides)


def _optimization(batch: int):
    from albert_tf import training

    return training.OptimizationConfig(train_batch_size=batch, num_train_steps=10 ** 6,
                                       num_warmup_steps=10, learning_rate=1e-4)


@threads.uses("tensorflow")
def train_step(preset: str, precision: str, xla: bool, batch: int, seq: int, warmup: int,
               steps: int, optimizer_alone: bool = False, dropout: float = None) -> Dict[str, float]:
    """albert-pretrain's step (`albert_tf.training.step.build_train_step`).

    The same TrainState (model, LAMB with clipping, schedule) and distributed
    step the binary runs, fed from an in-memory dataset; checkpointing and
    logging, which happen every few thousand steps, are left out.
    With optimizer_alone, also times the LAMB update on its own (zero
    gradients, the same memory traffic), to split the step into arithmetic
    (forward + backward) and the parameter-proportional update. dropout
    (when given) replaces the preset's dropout rates.
    """
    from albert_tf import runtime
    from albert_tf.training.state import TrainState
    from albert_tf.training.step import build_train_step, distributed_train_iterator

    config = _config(preset, dropout=dropout)
    strategy = tf.distribute.get_strategy()
    examples = common.synthetic_pretraining_batch(batch, seq, common.PREDICTIONS_PER_SEQ,
                                                  config.vocab_size)
    with tempfile.TemporaryDirectory() as ckpt_dir:
        state = TrainState.create(config, _optimization(batch), runtime.resolve_mixed_precision(precision),
                                  strategy, ckpt_dir, 1)
        iterator = distributed_train_iterator(
            strategy, lambda ctx: tf.data.Dataset.from_tensors(examples).repeat(), 0, seq,
            common.PREDICTIONS_PER_SEQ, batch)
        step = build_train_step(state, strategy, 1, xla)
        times = common.timed_calls(lambda: float(step(iterator)["mlm_nll_sum"]), warmup, steps)
        result = common.per_second(batch, times)
        result["parameters"] = int(sum(np.prod(v.shape) for v in state.model.trainable_variables))
        if optimizer_alone:
            variables = state.model.trainable_variables

            @tf.function
            def update():
                state.optimizer.apply_gradients([(tf.zeros_like(v), v) for v in variables])
                return state.optimizer.iterations

            opt_times = common.timed_calls(lambda: int(update()), 1, 3)
            result["optimizer_s"] = statistics.median(opt_times)
            result["step_s"] = statistics.median(times)
    return result


@threads.uses("tensorflow")
def train_fit(precision: str, xla: bool, batch: int, seq: int, warmup: int, steps: int,
              preset: str = "albert_base_v2") -> Dict[str, float]:
    """`AlbertPretrainer.compile(optimizer=LAMB, jit_compile=xla)` then `fit`.

    Per-step times from a callback (TF runs the CPU train function
    synchronously, so batch ends are step ends).
    """
    import keras

    import albert_tf
    from albert_tf import runtime

    config = _config(preset)
    model = albert_tf.AlbertPretrainer(
        config, dtype=runtime.dtype_policy_name(runtime.resolve_mixed_precision(precision)))
    opt = _optimization(batch)
    model.compile(optimizer=opt.create_optimizer(), jit_compile=xla)
    examples = common.synthetic_pretraining_batch(batch, seq, common.PREDICTIONS_PER_SEQ,
                                                  config.vocab_size)
    dataset = tf.data.Dataset.from_tensors(examples).repeat()
    return _fit_timed(model, dataset, batch, warmup, steps, keras)


def _fit_timed(model, dataset, batch, warmup, steps, keras) -> Dict[str, float]:
    stamps: List[float] = []

    class Stamp(keras.callbacks.Callback):
        def on_train_batch_end(self, step, logs=None):
            stamps.append(time.perf_counter())

    model.fit(dataset, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[Stamp()])
    times = list(np.diff(stamps[warmup - 1:])) if warmup >= 1 else list(np.diff(stamps))
    return common.per_second(batch, times)


def _tf_encoder_batch(batch: int, seq: int, vocab: int) -> Dict[str, tf.Tensor]:
    ex = common.synthetic_pretraining_batch(batch, seq, 1, vocab)
    return {k: tf.constant(ex[k]) for k in ("input_ids", "input_mask", "segment_ids")}


def offset_biases(model, seed: int = 0, stddev: float = 0.02) -> None:
    """Adds a small random offset to every 1-D weight (biases, LayerNorm).

    Trained biases are not zero; in a frozen graph zero constants are folded
    away, and with them the fusions a trained model gets.
    """
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if len(weight.shape) == 1:
            weight.assign(weight + rng.normal(0, stddev, weight.shape).astype(np.float32))


@threads.uses("tensorflow")
def infer(precision: str, xla: bool, batch: int, seq: int, warmup: int, steps: int,
          rows_per_bucket: int = 0, frozen: bool = False, shape: str = "base") -> Dict[str, float]:
    """Encoder forward pass (pooled output), tf.function, optionally XLA;
    with rows_per_bucket, in buckets of that many rows (as the classifier runs);
    with frozen, the graph `albert_tf.export_saved_model` serves (weights as
    constants, `albert_tf.export.base.freeze_model_call`)."""
    import albert_tf
    from albert_tf import runtime
    from albert_tf.models.length_buckets import pooled_output_in_buckets

    encoder = albert_tf.AlbertEncoder(
        _config(shape),
        dtype=runtime.dtype_policy_name(runtime.resolve_mixed_precision(precision)))
    inputs = _tf_encoder_batch(batch, seq, encoder.config.vocab_size)
    if frozen:
        if xla or rows_per_bucket:
            raise ValueError(f"frozen=True measures the exported graph: no xla ({xla}) or buckets ({rows_per_bucket}).")
        from albert_tf.export.base import freeze_model_call

        encoder(inputs)  # builds the weights
        offset_biases(encoder)
        graph, outputs = freeze_model_call(encoder, {k: tf.TensorSpec([None, None], v.dtype)
                                                     for k, v in inputs.items()})
        flat_inputs = tf.nest.flatten(inputs)

        def forward(_):
            return tf.nest.pack_sequence_as(outputs, graph(*flat_inputs))["pooled_output"]
    elif rows_per_bucket:
        forward = tf.function(lambda x: pooled_output_in_buckets(encoder, x, rows_per_bucket), jit_compile=xla)
    else:
        forward = tf.function(lambda x: encoder(x, training=False)["pooled_output"], jit_compile=xla)
    times = common.timed_calls(lambda: forward(inputs).numpy(), warmup, steps)
    return common.per_second(batch, times)


def _text_classifier(precision: str, spm_path: str, shape: str = "base"):
    import albert_tf
    from albert_tf import runtime

    config = _config(shape, vocab_size=common.TEXT_VOCAB_SIZE)
    pre = albert_tf.AlbertTextPreprocessor(spm_path, max_seq_length=common.TEXT_MAX_SEQ_LENGTH)
    return albert_tf.AlbertClassifier(
        config, 2, preprocessor=pre,
        dtype=runtime.dtype_policy_name(runtime.resolve_mixed_precision(precision)))


def _pool_tensors(pool_file: str, feed: str, warmup: int, steps: int):
    """The pool's warm-up and timed batches as string tensors."""
    sentences, warm, timed = common.read_text_pool(pool_file, feed, warmup, steps)
    as_tensor = lambda batch: tf.constant([sentences[i] for i in batch])  # noqa: E731
    return [as_tensor(b) for b in warm], [as_tensor(b) for b in timed]


def _masks(model, timed) -> List[np.ndarray]:
    """The padding masks of the work the classifier does on each timed batch: per length bucket of
    `model.inference_rows_per_bucket` rows (sorted by length, each cut to its longest), or the batch padded
    to its longest row."""
    out = []
    for batch in timed:
        mask = model.preprocessor(batch)["input_mask"].numpy()
        rows = model.inference_rows_per_bucket
        if not rows:
            out.append(mask)
            continue
        lengths = mask.sum(axis=1)
        out += [mask[c, :int(lengths[c].max())] for c in common.length_sorted_chunks(lengths, rows)]
    return out


@threads.uses("tensorflow")
def text(precision: str, spm_path: str, pool_file: str, feed: str, warmup: int, steps: int,
         rows_per_bucket: int = 8, shape: str = "base") -> Dict[str, float]:
    """Raw strings through the task model (in-graph preprocessor + encoder + head),
    over `steps` batches of the pool (`common.read_text_pool`).

    rows_per_bucket: the classifier's length buckets (its default, 8: each batch's rows
    sorted by length and run 8 at a time, each bucket padded to its longest); 0: each
    batch runs padded to its longest row.
    """
    model = _text_classifier(precision, spm_path, shape)
    model.inference_rows_per_bucket = int(rows_per_bucket) or None
    warm, timed = _pool_tensors(pool_file, feed, warmup, steps)
    forward = tf.function(lambda t: model(t, training=False))
    times = common.timed_pass(lambda b: forward(b).numpy(), warm, timed)
    return common.text_pass_result(times, _masks(model, timed))


@threads.uses("tensorflow")
def saved_model_text(precision: str, spm_path: str, pool_file: str, feed: str, warmup: int,
                     steps: int, freeze_weights: Optional[bool] = None, shape: str = "base") -> Dict[str, float]:
    """Raw strings through the SavedModel `albert_tf.export_saved_model` writes
    (freeze_weights: as its argument; the classifier's length buckets of 8 rows, as
    exported by default): the pool's batches, then single-sentence requests (latency)."""
    import albert_tf

    model = _text_classifier(precision, spm_path, shape)
    warm, timed = _pool_tensors(pool_file, feed, warmup, steps)
    masks = _masks(model, timed)
    with tempfile.TemporaryDirectory() as export_dir:
        path = albert_tf.export_saved_model(model, export_dir, freeze_weights=freeze_weights)
        del model
        loaded = tf.saved_model.load(path)
        serve = loaded.signatures["serving_default"]
        times = common.timed_pass(lambda b: serve(text=b)["probabilities"].numpy(), warm, timed)
        result = common.text_pass_result(times, masks)
        singles = [tf.reshape(s, [1]) for s in tf.unstack(timed[0])]
        for s in singles[:3]:
            serve(text=s)["probabilities"].numpy()
        latencies = []
        for s in singles:
            start = time.perf_counter()
            serve(text=s)["probabilities"].numpy()
            latencies.append(time.perf_counter() - start)
        result["latency_ms_median"] = 1000 * statistics.median(latencies)
        result["latency_ms_p90"] = 1000 * float(np.percentile(latencies, 90))
    return result
