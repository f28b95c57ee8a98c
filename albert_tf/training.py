"""The custom pretraining loop shared by the binaries (albert-pretrain, albert-demo).

Why a custom loop and not `model.fit`: Keras 3 `fit` breaks under
MultiWorkerMirroredStrategy and the optimizer's own gradient accumulation breaks
under every strategy (shared/reference/tf-keras-notes.md). This loop runs on
any `tf.distribute` strategy:

* input: `strategy.distribute_datasets_from_function(dataset_fn)`; each replica
  reads batches of ``train_batch_size / num_replicas`` examples and splits them
  into `gradient_accumulation_steps` micro-batches inside the step;
* loss: every micro-batch divides its *local sums* (`pretraining_loss_terms`)
  by the *global* denominators (masked-LM weight sum and example count over all
  replicas and micro-batches), so the summed gradient is exactly the gradient
  of the original loss on the whole global batch;
* update: the optimizer all-reduces, clips to global norm 1.0 and applies once
  per step (`albert_tf.optimization`);
* checkpoints: `tf.train.Checkpoint(model, optimizer, global_step, ...)` every N
  steps through a `tf.train.CheckpointManager`; a restart with the same
  arguments restores the latest one and skips the batches already consumed, so
  it continues exactly where the interrupted run was.

Entry points: `run_pretraining` (train, optionally evaluate),
`run_evaluation` (evaluate a checkpoint), `evaluate`, `get_strategy`,
`is_chief`, `write_eval_results`, `write_scalar_summary`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from typing import Any, Callable, Dict, Optional

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.checkpoints import CONFIG_FILENAME
from albert_tf.config import AlbertConfig
from albert_tf.models.pretrainer import (
    MLM_WEIGHT_EPSILON,
    AlbertPretrainer,
    pretraining_loss_terms,
)
from albert_tf import optimization

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]

EVAL_RESULTS_FILENAME = "eval_results.txt"
CHECKPOINT_NAME = "ckpt"
_DTYPE_POLICIES = {
    "float32": "float32",
    "bfloat16": "mixed_bfloat16",
    "float16": "mixed_float16",
}
_TERM_KEYS = ("mlm_nll_sum", "mlm_weight_sum", "mlm_correct_sum",
              "sop_nll_sum", "sop_correct_sum", "num_examples")
_SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
_PREDICTION_FEATURES = ("masked_lm_positions", "masked_lm_ids",
                        "masked_lm_weights")


class TrainingError(RuntimeError):
    """Training stopped: NaN loss, bad input data or an inconsistent output_dir."""


# --------------------------------------------------------------- strategies
def get_strategy(name: str = "default", tpu: Optional[str] = None,
                 num_gpus: Optional[int] = None) -> tf.distribute.Strategy:
    """Creates the `tf.distribute` strategy named by --strategy.

    Args:
        name: "default" (no distribution), "mirrored" (one host, several
            devices), "multi_worker_mirrored" (several hosts; reads TF_CONFIG)
            or "tpu".
        tpu: TPU name or grpc:// address for "tpu" ("" = local TPU).
        num_gpus: GPUs for "mirrored"; None uses all GPUs, or all logical CPU
            devices when there is no GPU.

    Returns:
        The strategy.

    Example:

    >>> get_strategy("default").num_replicas_in_sync
    1
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if num_gpus is not None:
            if num_gpus > len(gpus):
                raise ValueError(
                    f"--num_gpus={num_gpus} but only {len(gpus)} GPU(s) found.")
            gpus = gpus[:num_gpus]
        devices = [d.name for d in gpus] or [
            d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(
        f"Unknown strategy {name!r}; expected default, mirrored, "
        "multi_worker_mirrored or tpu.")


def _task(strategy) -> tuple[Optional[str], int]:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None, 0
    return resolver.task_type, int(resolver.task_id or 0)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the worker that writes checkpoints, summaries and results."""
    task_type, task_id = _task(strategy)
    if task_type is None or task_type == "chief":
        return True
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and "chief" not in spec


# ------------------------------------------------------------ output_dir
def _check_or_write_config(config: AlbertConfig, output_dir: str,
                           chief: bool) -> None:
    path = os.path.join(output_dir, CONFIG_FILENAME)
    if tf.io.gfile.exists(path):
        existing = AlbertConfig.from_json_file(path)
        if existing != config:
            ours, theirs = config.to_dict(), existing.to_dict()
            diff = ", ".join(
                f"{k}: {theirs.get(k)!r} there vs {ours.get(k)!r} now"
                for k in sorted(set(ours) | set(theirs))
                if ours.get(k) != theirs.get(k))
            raise TrainingError(
                f"output_dir {output_dir!r} holds a run of a different model "
                f"({diff}). Use a new --output_dir, or the same config to "
                "resume.")
        return
    if chief:
        tmp = f"{path}.tmp-{os.getpid()}"
        config.to_json_file(tmp)
        tf.io.gfile.rename(tmp, path, overwrite=True)


def write_eval_results(path: str, results: Dict[str, Any]) -> None:
    """Writes ``key = value`` lines, sorted, as the original's eval_results.txt."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with tf.io.gfile.GFile(tmp, "w") as f:
        for key in sorted(results):
            f.write(f"{key} = {results[key]}\n")
    tf.io.gfile.rename(tmp, path, overwrite=True)


# ------------------------------------------------------------- helpers
def write_scalar_summary(name: str, value: float) -> None:
    """A TensorBoard scalar through the default writer and step.

    `tf.summary.scalar` needs the tensorboard package, which TensorFlow 2.21
    does not install; this writes the same record (the "scalars" plugin tag)
    with core ops only.
    """
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(name, tf.constant(float(value), tf.float32),
                     metadata=metadata.SerializeToString())


def _check_element_spec(spec, max_seq_length, max_predictions_per_seq,
                        per_replica_batch):
    if not isinstance(spec, dict):
        raise TrainingError(
            f"The dataset must yield dicts of features; got {spec!r}.")
    missing = [k for k in _SEQUENCE_FEATURES[:1] + _PREDICTION_FEATURES +
               ("next_sentence_labels",) if k not in spec]
    if missing:
        raise TrainingError(
            f"The dataset lacks features {missing}; it has {sorted(spec)}.")
    expected = {k: max_seq_length for k in _SEQUENCE_FEATURES}
    expected.update({k: max_predictions_per_seq for k in _PREDICTION_FEATURES})
    for key, length in expected.items():
        if key not in spec or length is None:
            continue
        shape = spec[key].shape
        if shape.rank != 2 or (shape[1] is not None and shape[1] != length):
            raise TrainingError(
                f"Feature {key!r} has shape {shape}, expected [batch, {length}] "
                f"(--max_seq_length / --max_predictions_per_seq do not match "
                "the data).")
    batch = spec["input_ids"].shape[0]
    if batch is not None and per_replica_batch and batch != per_replica_batch:
        raise TrainingError(
            f"The dataset yields batches of {batch} per replica, expected "
            f"{per_replica_batch} (use input_context."
            "get_per_replica_batch_size(train_batch_size)).")


def _split(batch: Dict[str, tf.Tensor], parts: int):
    """[B, ...] features -> [parts, B/parts, ...]."""
    out = {}
    for key, value in batch.items():
        shape = tf.shape(value)
        out[key] = tf.reshape(
            value, tf.concat([[parts, shape[0] // parts], shape[1:]], 0))
    return out


def _format_eta(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


def _losses_from_sums(sums: Dict[str, float]) -> Dict[str, float]:
    weight = sums["mlm_weight_sum"]
    examples = max(sums["num_examples"], 1.0)
    mlm_loss = sums["mlm_nll_sum"] / (weight + MLM_WEIGHT_EPSILON)
    sop_loss = sums["sop_nll_sum"] / examples
    return {
        "loss": mlm_loss + sop_loss,
        "mlm_loss": mlm_loss,
        "sop_loss": sop_loss,
        "mlm_accuracy": sums["mlm_correct_sum"] / max(weight,
                                                      MLM_WEIGHT_EPSILON),
        "sop_accuracy": sums["sop_correct_sum"] / examples,
    }


def _warm_start(pretrainer: AlbertPretrainer, path: str,
                config: AlbertConfig) -> None:
    """Copies every weight of `path` whose variable path and shape match."""
    import albert_tf  # the package exports load_checkpoint; avoid a cycle

    try:
        source = albert_tf.load_checkpoint(path)
    except FileNotFoundError:
        source = albert_tf.load_checkpoint(path, config=config)
    values = {v.path: v for v in source.weights}
    loaded, skipped = 0, []
    for var in pretrainer.weights:
        src = values.get(var.path)
        if src is not None and tuple(src.shape) == tuple(var.shape):
            var.assign(src.numpy())
            loaded += 1
        elif var.trainable:
            skipped.append(var.path)
    if loaded == 0:
        raise TrainingError(
            f"--init_checkpoint={path!r} shares no weight with this model.")
    logging.info("Warm start from %s: %d variables loaded, %d kept fresh %s",
                 path, loaded, len(skipped), skipped[:10])


@dataclasses.dataclass
class _LossScale:
    """Dynamic loss scaling for float16 (per replica, kept identical)."""

    scale: tf.Variable
    good_steps: tf.Variable
    period: int = 2000

    @classmethod
    def create(cls, initial: float = 2.0 ** 15) -> "_LossScale":
        kw = dict(trainable=False,
                  synchronization=tf.VariableSynchronization.ON_READ,
                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        return cls(tf.Variable(initial, dtype=tf.float32, name="loss_scale",
                               **kw),
                   tf.Variable(0, dtype=tf.int64, name="good_steps", **kw))

    def update(self, finite: tf.Tensor) -> None:
        grow = tf.logical_and(finite, self.good_steps + 1 >= self.period)
        new_scale = tf.where(
            finite, tf.where(grow, self.scale * 2.0, self.scale),
            tf.maximum(self.scale / 2.0, 1.0))
        new_good = tf.where(tf.logical_and(finite, tf.logical_not(grow)),
                            self.good_steps + 1, tf.zeros_like(self.good_steps))
        self.scale.assign(new_scale)
        self.good_steps.assign(new_good)


# ------------------------------------------------------------ evaluation
def evaluate(pretrainer: AlbertPretrainer, eval_dataset_fn: DatasetFn,
             strategy: Optional[tf.distribute.Strategy] = None,
             max_eval_steps: int = 100) -> Dict[str, float]:
    """Masked-LM and SOP metrics over at most `max_eval_steps` batches.

    Args:
        pretrainer: the model (created under `strategy.scope()`).
        eval_dataset_fn: ``InputContext -> tf.data.Dataset`` of per-replica
            batches (finite; uneven ends across replicas are handled).
        strategy: the strategy the model lives in (default: the current one).
        max_eval_steps: batches at most.

    Returns:
        masked_lm_accuracy, masked_lm_loss (weighted mean NLL),
        sentence_order_accuracy, sentence_order_loss, loss (their sum as the
        original's total), num_examples.
    """
    strategy = strategy or tf.distribute.get_strategy()
    dataset = strategy.distribute_datasets_from_function(eval_dataset_fn)

    def replica_fn(batch):
        outputs = pretrainer(batch, training=False)
        return pretraining_loss_terms(batch, outputs)

    @tf.function
    def run(iterator):
        sums = tf.zeros([len(_TERM_KEYS)])
        for _ in tf.range(max_eval_steps):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            terms = strategy.run(replica_fn, args=(optional.get_value(),))
            sums += tf.stack([
                strategy.reduce(tf.distribute.ReduceOp.SUM, terms[k], axis=None)
                for k in _TERM_KEYS])
        return sums

    sums = dict(zip(_TERM_KEYS, run(iter(dataset)).numpy().tolist()))
    if sums["num_examples"] == 0:
        raise TrainingError("The evaluation data yielded no example.")
    weight = max(sums["mlm_weight_sum"], MLM_WEIGHT_EPSILON)
    results = {
        "masked_lm_accuracy": sums["mlm_correct_sum"] / weight,
        "masked_lm_loss": sums["mlm_nll_sum"] / weight,
        "sentence_order_accuracy": sums["sop_correct_sum"] / sums["num_examples"],
        "sentence_order_loss": sums["sop_nll_sum"] / sums["num_examples"],
        "num_examples": int(sums["num_examples"]),
    }
    results["loss"] = results["masked_lm_loss"] + results["sentence_order_loss"]
    return results


def run_evaluation(
    config: AlbertConfig,
    eval_dataset_fn: DatasetFn,
    output_dir: str,
    *,
    checkpoint: Optional[str] = None,
    strategy: Optional[tf.distribute.Strategy] = None,
    max_eval_steps: int = 100,
    mixed_precision: str = "float32",
) -> Dict[str, Any]:
    """Evaluates a checkpoint and writes output_dir/eval_results.txt.

    Args:
        config: the model config.
        eval_dataset_fn: ``InputContext -> tf.data.Dataset`` of per-replica
            batches.
        output_dir: where eval_results.txt goes; its latest training
            checkpoint is evaluated unless `checkpoint` is given.
        checkpoint: anything `albert_tf.load_checkpoint` reads.
        strategy: the `tf.distribute.Strategy` (default: the current one).
        max_eval_steps: batches at most.
        mixed_precision: "float32", "bfloat16" or "float16".

    Returns:
        The results written (see `evaluate`), with global_step.
    """
    strategy = strategy or tf.distribute.get_strategy()
    latest = (tf.train.latest_checkpoint(output_dir)
              if tf.io.gfile.exists(output_dir) else None)
    path = latest or checkpoint
    if not path:
        raise TrainingError(
            f"Nothing to evaluate: no checkpoint in {output_dir!r} and no "
            "checkpoint given.")
    with strategy.scope():
        pretrainer = AlbertPretrainer(config,
                                      dtype=_DTYPE_POLICIES[mixed_precision])
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    if latest:  # a training checkpoint of this loop: weights and step
        tf.train.Checkpoint(model=pretrainer, global_step=global_step).read(
            latest).assert_existing_objects_matched().expect_partial()
    else:
        _warm_start(pretrainer, checkpoint, config)
    results = evaluate(pretrainer, eval_dataset_fn, strategy, max_eval_steps)
    results["global_step"] = int(global_step.numpy())
    if is_chief(strategy):
        tf.io.gfile.makedirs(output_dir)
        write_eval_results(os.path.join(output_dir, EVAL_RESULTS_FILENAME),
                           results)
    logging.info("Evaluation of %s: %s", path, results)
    return results


# -------------------------------------------------------------- training
def run_pretraining(
    config: AlbertConfig,
    train_dataset_fn: DatasetFn,
    output_dir: str,
    *,
    train_batch_size: int,
    num_train_steps: int,
    max_seq_length: Optional[int] = None,
    max_predictions_per_seq: Optional[int] = None,
    optimizer: str = "lamb",
    learning_rate: float = 0.00176,
    num_warmup_steps: int = 3125,
    start_warmup_step: int = 0,
    poly_power: float = 1.0,
    weight_decay_rate: float = 0.01,
    clip_norm: float = 1.0,
    gradient_accumulation_steps: int = 1,
    mixed_precision: str = "float32",
    jit_compile: bool = False,
    save_checkpoints_steps: int = 5000,
    keep_checkpoint_max: int = 5,
    log_steps: int = 100,
    init_checkpoint: Optional[str] = None,
    spm_model_file: Optional[str] = None,
    eval_dataset_fn: Optional[DatasetFn] = None,
    max_eval_steps: int = 100,
    strategy: Optional[tf.distribute.Strategy] = None,
    seed: int = 12345,
    max_train_seconds: Optional[float] = None,
    log_callback: Optional[Callable[[Dict[str, Any]], None]] = None,
) -> Dict[str, Any]:
    """Pretrains an `AlbertPretrainer` (MLM + SOP) and writes it to output_dir.

    Restarting with the same arguments resumes from the latest checkpoint in
    output_dir (weights, optimizer slots, step, loss scale, dropout RNG state,
    data position) and logs "Resumed from step N". The data position is
    restored by skipping the batches already consumed (the checkpoint holds
    the step, not the tf.data iterator, which tf.distribute's iterators cannot
    checkpoint): exact for a deterministic dataset_fn and the same number of
    replicas, but the skipped batches are read again, which takes time for
    long runs.

    Args:
        config: the model config; output_dir must not hold another one.
        train_dataset_fn: ``InputContext -> tf.data.Dataset`` yielding dict
            batches with the TFRecord feature names, of
            ``input_context.get_per_replica_batch_size(train_batch_size)``
            examples, repeating (e.g. `pipelines.pretraining_dataset`). It must
            be deterministic for an exact resume (seeded shuffles).
        output_dir: checkpoints (ckpt-<step>), TensorBoard summaries (train/,
            eval/), albert_config.json, model.weights.safetensors, the SentencePiece
            model, eval_results.txt.
        train_batch_size: global batch = per-replica batch x replicas x
            gradient_accumulation_steps.
        num_train_steps: optimizer steps (also the decay horizon).
        max_seq_length: checked against the data when given.
        max_predictions_per_seq: checked against the data when given.
        optimizer: "lamb" or "adamw" (`albert_tf.optimization`).
        learning_rate: peak learning rate.
        num_warmup_steps: linear warmup steps.
        start_warmup_step: the step warmup counts from.
        poly_power: power of the polynomial decay.
        weight_decay_rate: decoupled weight decay.
        clip_norm: global-norm clipping of the global-batch gradient (0: off).
        gradient_accumulation_steps: micro-batches per step.
        mixed_precision: "float32", "bfloat16" or "float16" (loss scaling).
        jit_compile: XLA-compile forward and backward passes.
        save_checkpoints_steps: checkpoint interval in steps.
        keep_checkpoint_max: checkpoints kept.
        log_steps: log/summary interval in steps.
        init_checkpoint: warm start from anything `albert_tf.load_checkpoint`
            reads (ignored when resuming).
        spm_model_file: SentencePiece model copied into output_dir.
        eval_dataset_fn: if given, evaluate after training and write
            eval_results.txt.
        max_eval_steps: evaluation batches at most.
        strategy: a `tf.distribute.Strategy` (default: the current one).
        seed: seeds weight initialisation and dropout.
        max_train_seconds: stop (with a checkpoint) once training has run
            this long, even before num_train_steps; the schedule still decays
            over num_train_steps. Multi-worker runs check it every log_steps.
        log_callback: called with each logged dict (step, loss, ...).

    Returns:
        dict with global_step, the last interval's train metrics (loss,
        mlm_accuracy, sop_accuracy, learning_rate, examples_per_second, ...),
        checkpoint (latest path), model (the trained `AlbertPretrainer`), and
        eval_* results when evaluated.

    Example (tiny model, random data):

    ```python
    import albert_tf, tensorflow as tf
    from albert_tf import training

    def dataset_fn(ctx):
        b = ctx.get_per_replica_batch_size(8)
        ex = {"input_ids": tf.ones([16], tf.int32),
              "input_mask": tf.ones([16], tf.int32),
              "segment_ids": tf.zeros([16], tf.int32),
              "masked_lm_positions": tf.constant([1, 2], tf.int32),
              "masked_lm_ids": tf.constant([5, 6], tf.int32),
              "masked_lm_weights": tf.ones([2]),
              "next_sentence_labels": tf.constant(0, tf.int32)}
        return tf.data.Dataset.from_tensors(ex).repeat().batch(b)

    training.run_pretraining(albert_tf.AlbertConfig.tiny(), dataset_fn,
                             "/tmp/tiny_run", train_batch_size=8,
                             num_train_steps=3, num_warmup_steps=1)
    ```
    """
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    accum = int(gradient_accumulation_steps)
    if accum < 1:
        raise ValueError(
            f"gradient_accumulation_steps must be >= 1, got {accum}.")
    if train_batch_size <= 0 or train_batch_size % (replicas * accum):
        raise ValueError(
            f"train_batch_size={train_batch_size} must be a positive multiple "
            f"of replicas x gradient_accumulation_steps = {replicas} x {accum}.")
    if num_train_steps <= 0:
        raise ValueError(f"num_train_steps must be positive, got "
                         f"{num_train_steps}.")
    if mixed_precision not in _DTYPE_POLICIES:
        raise ValueError(
            f"mixed_precision={mixed_precision!r}; expected one of "
            f"{sorted(_DTYPE_POLICIES)}.")
    if max_seq_length and max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"max_seq_length={max_seq_length} exceeds the model's "
            f"max_position_embeddings={config.max_position_embeddings}.")
    save_checkpoints_steps = max(1, int(save_checkpoints_steps))
    log_steps = max(1, int(log_steps))
    per_replica_batch = train_batch_size // replicas
    micro_batch = per_replica_batch // accum
    chief = is_chief(strategy)
    task_type, task_id = _task(strategy)

    tf.io.gfile.makedirs(output_dir)
    _check_or_write_config(config, output_dir, chief)
    # Non-chief workers must take part in saving (collectives) but write to a
    # private folder that is removed at the end.
    ckpt_dir = output_dir if chief else os.path.join(
        output_dir, f".worker-{task_type}-{task_id}")

    keras.utils.set_random_seed(seed)
    with strategy.scope():
        pretrainer = AlbertPretrainer(
            config, dtype=_DTYPE_POLICIES[mixed_precision])
        schedule = optimization.WarmupPolynomialDecay(
            learning_rate, decay_steps=num_train_steps,
            warmup_steps=num_warmup_steps, power=poly_power,
            start_warmup_step=start_warmup_step)
        opt = optimization.create_optimizer(
            optimizer, schedule, weight_decay_rate=weight_decay_rate,
            global_clipnorm=clip_norm or None)
        opt.build(pretrainer.trainable_variables)
        global_step = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="global_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        loss_scale = (_LossScale.create() if mixed_precision == "float16"
                      else None)

    # Dropout RNG states are Keras variables that tf.train.Checkpoint does not
    # reach through the model; track them so that a resumed run draws the
    # same dropout masks as an uninterrupted one.
    rng = tf.Module()
    rng.states = [v.value for v in pretrainer.non_trainable_variables
                  if "seed_generator" in v.path]
    tracked = dict(model=pretrainer, optimizer=opt, global_step=global_step,
                   rng=rng)
    if loss_scale is not None:
        tracked.update(loss_scale=loss_scale.scale,
                       good_steps=loss_scale.good_steps)
    checkpoint = tf.train.Checkpoint(**tracked)
    manager = tf.train.CheckpointManager(
        checkpoint, ckpt_dir, max_to_keep=keep_checkpoint_max,
        checkpoint_name=CHECKPOINT_NAME)
    latest = tf.train.latest_checkpoint(output_dir)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Resumed from step %d (%s)", int(global_step.numpy()),
                     latest)
    elif init_checkpoint:
        _warm_start(pretrainer, init_checkpoint, config)
    start_step = int(global_step.numpy())

    # Data position: the dataset is deterministic, so skipping the batches the
    # earlier run consumed puts the restarted run at the same example.
    def dataset_fn(ctx):
        dataset = train_dataset_fn(ctx)
        _check_element_spec(dataset.element_spec, max_seq_length,
                            max_predictions_per_seq, per_replica_batch)
        return dataset.skip(start_step) if start_step else dataset

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    variables = pretrainer.trainable_variables

    # No tensor-dependent Python control flow below: AutoGraph has nothing to
    # convert (and warns about closures when run_pretraining runs twice).
    @tf.autograph.experimental.do_not_convert
    def micro_step(batch, mlm_denominator, num_examples, scale):
        with tf.GradientTape() as tape:
            outputs = pretrainer(batch, training=True)
            terms = pretraining_loss_terms(batch, outputs)
            loss = (terms["mlm_nll_sum"] / mlm_denominator +
                    terms["sop_nll_sum"] / num_examples)
            scaled = loss * scale if scale is not None else loss
        grads = tape.gradient(scaled, variables)
        # Dense, so that micro-batch gradients can be summed in a loop.
        grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                 for g, v in zip(grads, variables)]
        return grads, terms

    if jit_compile:
        micro_step = tf.function(micro_step, jit_compile=True)

    @tf.autograph.experimental.do_not_convert
    def replica_step(batch):
        ctx = tf.distribute.get_replica_context()
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)
        local = tf.stack([tf.reduce_sum(weights),
                          tf.cast(tf.shape(weights)[0], tf.float32)])
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local)
        mlm_denominator = total[0] + MLM_WEIGHT_EPSILON
        num_examples = total[1]
        scale = loss_scale.scale.read_value() if loss_scale else None
        if accum == 1:
            grads, terms = micro_step(batch, mlm_denominator, num_examples,
                                      scale)
        else:
            parts = _split(batch, accum)

            def body(k, grads, terms):
                micro = {key: value[k] for key, value in parts.items()}
                g, t = micro_step(micro, mlm_denominator, num_examples, scale)
                return (k + 1, [a + b for a, b in zip(grads, g)],
                        {key: terms[key] + t[key] for key in _TERM_KEYS})

            _, grads, terms = tf.while_loop(
                lambda k, *_: k < accum, body,
                (tf.constant(0),
                 [tf.zeros_like(v) for v in variables],
                 {key: tf.constant(0.0) for key in _TERM_KEYS}))
        if loss_scale is not None:
            grads = [g / scale for g in grads]
            finite_local = tf.reduce_all(
                [tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            bad = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                                 1.0 - tf.cast(finite_local, tf.float32))
            loss_scale.update(bad == 0.0)
        # All-reduce, global-norm clipping and the update happen in the
        # optimizer (non-finite gradients leave the weights untouched).
        opt.apply_gradients(zip(grads, variables))
        return {key: terms[key] for key in _TERM_KEYS}

    @tf.function
    def train_step(iterator):
        batch = next(iterator)
        terms = strategy.run(replica_step, args=(batch,))
        global_step.assign_add(1)
        return {key: strategy.reduce(tf.distribute.ReduceOp.SUM, terms[key],
                                     axis=None) for key in _TERM_KEYS}

    if chief:
        writer = tf.summary.create_file_writer(os.path.join(output_dir,
                                                            "train"))
    else:
        writer = tf.summary.create_noop_writer()

    logging.info(
        "Training steps %d..%d: global batch %d = %d per replica micro-batch "
        "x %d replicas x %d accumulation steps; %s, %s", start_step,
        num_train_steps, train_batch_size, micro_batch, replicas, accum,
        optimizer, mixed_precision)

    step = start_step
    pending = []  # (step, tensors) not yet fetched from the device
    interval = {"sums": {k: 0.0 for k in _TERM_KEYS}, "losses": [],
                "start": time.time(), "first": step}
    last = {}
    last_good_checkpoint = latest

    def flush():
        for s, terms in pending:
            values = {k: float(v) for k, v in terms.items()}
            loss = _losses_from_sums(values)["loss"]
            if not math.isfinite(loss):
                raise TrainingError(
                    f"Loss is {loss} at step {s}. Last good checkpoint: "
                    f"{last_good_checkpoint or 'none (no checkpoint yet)'}. "
                    "Lower --learning_rate, check the data, or use float32.")
            for k in _TERM_KEYS:
                interval["sums"][k] += values[k]
            interval["losses"].append(loss)
        pending.clear()

    def log_interval():
        nonlocal last
        elapsed = max(time.time() - interval["start"], 1e-9)
        steps = step - interval["first"]
        if steps == 0:
            return
        metrics = _losses_from_sums(interval["sums"])
        metrics["loss"] = float(np.mean(interval["losses"]))
        metrics.update(
            step=step,
            learning_rate=float(schedule(step - 1)),
            examples_per_second=steps * train_batch_size / elapsed,
            eta_seconds=(num_train_steps - step) * elapsed / steps)
        if max_train_seconds is not None:  # the time budget may end it first
            metrics["eta_seconds"] = min(
                metrics["eta_seconds"],
                max(0.0, max_train_seconds - (time.time() - train_start)))
        logging.info(
            "step %d/%d loss %.4f mlm_loss %.4f sop_loss %.4f mlm_acc %.4f "
            "sop_acc %.4f lr %.3g examples/s %.1f ETA %s", step,
            num_train_steps, metrics["loss"], metrics["mlm_loss"],
            metrics["sop_loss"], metrics["mlm_accuracy"],
            metrics["sop_accuracy"], metrics["learning_rate"],
            metrics["examples_per_second"],
            _format_eta(metrics["eta_seconds"]))
        with writer.as_default(step=step):
            for key in ("loss", "mlm_loss", "sop_loss", "mlm_accuracy",
                        "sop_accuracy", "learning_rate",
                        "examples_per_second"):
                write_scalar_summary(key, metrics[key])
        writer.flush()
        if log_callback is not None:
            log_callback(dict(metrics))
        last = metrics
        interval.update(sums={k: 0.0 for k in _TERM_KEYS}, losses=[],
                        start=time.time(), first=step)

    multi_worker = isinstance(strategy,
                              tf.distribute.MultiWorkerMirroredStrategy)

    @tf.function
    def _any_replica(flag):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(
            lambda: tf.identity(flag)), axis=None)

    def stop_any(flag: bool) -> bool:
        return bool(_any_replica(tf.constant(float(flag))) > 0)

    train_start = time.time()
    while step < num_train_steps:
        try:
            terms = train_step(iterator)
        except (tf.errors.OutOfRangeError, StopIteration) as e:
            if step == start_step:
                raise TrainingError(
                    "The training data yielded no batch: are the input files "
                    "empty, or smaller than one global batch of "
                    f"{train_batch_size}?") from e
            raise TrainingError(
                f"The training data ran out at step {step} of "
                f"{num_train_steps}; the dataset must repeat.") from e
        except tf.errors.InvalidArgumentError as e:
            if step == start_step:
                raise TrainingError(
                    "The first batch could not be read or used; are the "
                    "features of the length given by --max_seq_length="
                    f"{max_seq_length} / --max_predictions_per_seq="
                    f"{max_predictions_per_seq}? {e.message}") from e
            raise
        step += 1
        pending.append((step, terms))
        out_of_time = False
        if max_train_seconds is not None and (
                not multi_worker or step % log_steps == 0):
            out_of_time = time.time() - train_start > max_train_seconds
            if multi_worker:  # every worker must stop at the same step
                out_of_time = stop_any(out_of_time)
        last_step = step == num_train_steps or out_of_time
        save_now = step % save_checkpoints_steps == 0 or last_step
        if step % log_steps == 0 or save_now:
            flush()
        if step % log_steps == 0 or last_step:
            log_interval()
        if save_now:
            path = manager.save(checkpoint_number=step)
            if chief:
                last_good_checkpoint = path
                logging.info("Saved checkpoint %s", path)
        if out_of_time:
            logging.info("Time budget of %.0f s reached at step %d.",
                         max_train_seconds, step)
            break

    result: Dict[str, Any] = {"global_step": int(global_step.numpy())}
    result.update({k: v for k, v in last.items() if k != "step"})
    result["checkpoint"] = tf.train.latest_checkpoint(output_dir)
    result["model"] = pretrainer

    if chief:
        from albert_tf import checkpoints  # lazy: optional heavy imports

        checkpoints.save_pretrained(pretrainer, output_dir,
                                    spm_model_file=spm_model_file)
    else:
        shutil.rmtree(ckpt_dir, ignore_errors=True)

    if eval_dataset_fn is not None:
        results = evaluate(pretrainer, eval_dataset_fn, strategy,
                           max_eval_steps=max_eval_steps)
        results["global_step"] = result["global_step"]
        if chief:
            write_eval_results(os.path.join(output_dir, EVAL_RESULTS_FILENAME),
                               results)
            eval_writer = tf.summary.create_file_writer(
                os.path.join(output_dir, "eval"))
            with eval_writer.as_default(step=result["global_step"]):
                for key, value in results.items():
                    write_scalar_summary(key, value)
            eval_writer.flush()
        logging.info("Evaluation at step %d: %s", result["global_step"],
                     results)
        result.update({f"eval_{k}": v for k, v in results.items()})
    return result
