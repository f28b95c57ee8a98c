"""The distributed input and the distributed training step.

Input: each input pipeline yields per-replica batches of
``train_batch_size / replicas`` examples, so a step consumes
``replicas / input pipelines`` elements of each pipeline (one per replica it
feeds). `run_pretraining` reads them through `train_input.TrainInput`, whose
position checkpoints save; `distributed_train_iterator` (the tf.data service,
TPUStrategy) goes through `strategy.distribute_datasets_from_function` and
positions a resumed run by skipping that many elements per completed step.

Step: each replica splits its batch into `gradient_accumulation_steps`
micro-batches; every micro-batch divides its *local sums*
(`pretraining_loss_terms`) by the *global* denominators (masked-LM weight sum
and example count over all replicas and micro-batches), so the summed
gradient is exactly the gradient of the original loss on the whole global
batch. The optimizer all-reduces, clips and applies once per step.
"""

from __future__ import annotations

from typing import Dict, Optional

import tensorflow as tf

from albert_tf.models.encoder import ENCODER_INPUTS
from albert_tf.models.pretrainer import (
    LOSS_TERM_KEYS,
    MASKED_LM_FEATURES,
    MLM_WEIGHT_EPSILON,
    SENTENCE_ORDER_LABELS,
    pretraining_loss_terms,
)
from albert_tf.training import data_service
from albert_tf.training.common import DatasetFn, TrainingError
from albert_tf.training.state import TrainState


def check_element_spec(spec, max_seq_length: Optional[int],
                       max_predictions_per_seq: Optional[int],
                       per_replica_batch: Optional[int]) -> None:
    """TrainingError when a dataset's elements cannot be pretraining batches."""
    if not isinstance(spec, dict):
        raise TrainingError(
            f"The dataset must yield dicts of features; got {spec!r}.")
    required = ENCODER_INPUTS[:1] + MASKED_LM_FEATURES + (SENTENCE_ORDER_LABELS,)
    missing = [k for k in required if k not in spec]
    if missing:
        raise TrainingError(
            f"The dataset lacks features {missing}; it has {sorted(spec)}.")
    expected = {k: max_seq_length for k in ENCODER_INPUTS}
    expected.update({k: max_predictions_per_seq for k in MASKED_LM_FEATURES})
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


def elements_per_step(ctx: tf.distribute.InputContext) -> int:
    """Elements one input pipeline gives per step: one per replica it feeds.

    Example:

    >>> elements_per_step(tf.distribute.InputContext(1, 0, 2))
    2
    """
    return ctx.num_replicas_in_sync // max(ctx.num_input_pipelines, 1)


def distributed_train_iterator(strategy: tf.distribute.Strategy,
                               train_dataset_fn: DatasetFn, start_step: int,
                               max_seq_length: Optional[int],
                               max_predictions_per_seq: Optional[int],
                               per_replica_batch: int,
                               data_service_address: Optional[str] = None,
                               data_service_job: Optional[str] = None):
    """An iterator over per-replica batches, positioned after `start_step` steps.

    The dataset is deterministic, so skipping what `start_step` steps
    consumed puts a restarted run at the same example (reading those
    elements again: `train_input.TrainInput` restores the position from the
    checkpoint instead, and is what `run_pretraining` uses elsewhere). With
    `data_service_address` the dataset runs on tf.data service workers
    (`data_service.distribute`, job `data_service_job`); its order is not
    deterministic, so nothing is skipped (see `data_service.RESUME_NOTE`).
    """

    def dataset_fn(ctx):
        dataset = train_dataset_fn(ctx)
        check_element_spec(dataset.element_spec, max_seq_length,
                           max_predictions_per_seq, per_replica_batch)
        if data_service_address:
            return data_service.distribute(dataset, data_service_address,
                                           data_service_job)
        consumed = start_step * elements_per_step(ctx)
        return dataset.skip(consumed) if consumed else dataset

    return iter(strategy.distribute_datasets_from_function(dataset_fn))


def _split(batch: Dict[str, tf.Tensor], parts: int):
    """[B, ...] features -> [parts, B/parts, ...]."""
    out = {}
    for key, value in batch.items():
        shape = tf.shape(value)
        out[key] = tf.reshape(
            value, tf.concat([[parts, shape[0] // parts], shape[1:]], 0))
    return out


def whole_step_xla_supported(strategy: tf.distribute.Strategy) -> bool:
    """Whether a whole training step, all-reduce and optimizer update included,
    can be one XLA program under `strategy`: on one replica, and under
    TPUStrategy (which compiles the replicated step itself).

    Not under MirroredStrategy / MultiWorkerMirroredStrategy with several
    replicas: on CPU devices TensorFlow's XLA has no collectives ("Collectives
    are not yet implemented for CPU devices when compiling with XLA"); on
    GPUs, where TensorFlow does compile the all-reduce into the program, the
    Keras optimizers' step counter (aggregation ONLY_FIRST_REPLICA) is updated
    through merge_call, which fails inside it (keras-team/keras#17187;
    tests/albert_tf/test_xla_whole_step.py reproduces both on 2 CPU devices).

    Example:

    >>> whole_step_xla_supported(tf.distribute.get_strategy())
    True
    """
    return (strategy.num_replicas_in_sync == 1
            or isinstance(strategy, tf.distribute.TPUStrategy))


def build_train_step(state: TrainState, strategy: tf.distribute.Strategy,
                     gradient_accumulation_steps: int, jit_compile: bool,
                     jit_whole_step: bool = False, next_batch=next):
    """`train_step(iterator) -> loss-term sums over the global batch`.

    One call runs one optimizer step on every replica and advances
    `state.global_step`.

    Args:
        state: model, optimizer, loss scale and step counter.
        strategy: the strategy the variables live in.
        gradient_accumulation_steps: micro-batches per optimizer step.
        jit_compile: XLA-compile each micro-step (forward and backward).
        jit_whole_step: XLA-compile the whole replica step instead:
            accumulation, loss scaling, the non-finite guard, the all-reduce
            and the optimizer update too, as under TPUStrategy. An op XLA
            cannot compile fails the first call with its name.
        next_batch: `iterator -> the step's per-replica batch` (default
            `next`, for a distributed iterator; `train_input.TrainInput`
            gives its own).

    Raises:
        TrainingError: jit_whole_step with several replicas of a strategy
            other than TPUStrategy (`whole_step_xla_supported`).
    """
    if jit_whole_step and not whole_step_xla_supported(strategy):
        raise TrainingError(
            f"--jit_whole_step with {strategy.num_replicas_in_sync} replicas works only under "
            "TPUStrategy: XLA has no all-reduce on CPU devices, and on GPUs the Keras optimizer's step "
            "counter cannot be updated inside the compiled step (keras-team/keras#17187); use "
            "--jit_compile, which compiles each replica's forward and backward pass.")
    accum = gradient_accumulation_steps
    model, opt, loss_scale = state.model, state.optimizer, state.loss_scale
    variables = model.trainable_variables

    # No tensor-dependent Python control flow below: AutoGraph has nothing to
    # convert (and warns about closures when run_pretraining runs twice).
    @tf.autograph.experimental.do_not_convert
    def micro_step(batch, mlm_denominator, num_examples, scale):
        with tf.GradientTape() as tape:
            outputs = model(batch, training=True)
            terms = pretraining_loss_terms(batch, outputs)
            loss = (terms["mlm_nll_sum"] / mlm_denominator +
                    terms["sop_nll_sum"] / num_examples)
            scaled = loss * scale if scale is not None else loss
        grads = tape.gradient(scaled, variables)
        # Dense, so that micro-batch gradients can be summed in a loop.
        grads = [tf.convert_to_tensor(g) if g is not None else tf.zeros_like(v)
                 for g, v in zip(grads, variables)]
        return grads, terms

    if jit_compile and not jit_whole_step:
        micro_step = tf.function(micro_step, jit_compile=True)

    def accumulate(batch, mlm_denominator, num_examples, scale):
        if accum == 1:
            return micro_step(batch, mlm_denominator, num_examples, scale)
        parts = _split(batch, accum)

        def body(k, grads, terms):
            micro = {key: value[k] for key, value in parts.items()}
            g, t = micro_step(micro, mlm_denominator, num_examples, scale)
            return (k + 1, [a + b for a, b in zip(grads, g)],
                    {key: terms[key] + t[key] for key in LOSS_TERM_KEYS})

        _, grads, terms = tf.while_loop(
            lambda k, *_: k < accum, body,
            (tf.constant(0), [tf.zeros_like(v) for v in variables],
             {key: tf.constant(0.0) for key in LOSS_TERM_KEYS}))
        return grads, terms

    @tf.autograph.experimental.do_not_convert
    def replica_step(batch):
        ctx = tf.distribute.get_replica_context()
        weights = tf.cast(batch["masked_lm_weights"], tf.float32)
        local = tf.stack([tf.reduce_sum(weights),
                          tf.cast(tf.shape(weights)[0], tf.float32)])
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local)
        scale = loss_scale.scale.read_value() if loss_scale else None
        grads, terms = accumulate(batch, total[0] + MLM_WEIGHT_EPSILON,
                                  total[1], scale)
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
        return {key: terms[key] for key in LOSS_TERM_KEYS}

    if jit_whole_step:
        replica_step = tf.function(replica_step, jit_compile=True)

    @tf.function
    def train_step(iterator):
        batch = next_batch(iterator)
        terms = strategy.run(replica_step, args=(batch,))
        state.global_step.assign_add(1)
        return {key: strategy.reduce(tf.distribute.ReduceOp.SUM, terms[key],
                                     axis=None) for key in LOSS_TERM_KEYS}

    return train_step
