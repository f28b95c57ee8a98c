"""Evaluation of a pretrainer: metrics over a dataset, of a checkpoint, at the end of training."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import tensorflow as tf
from absl import logging

from albert_tf import runtime
from albert_tf.config import AlbertConfig
from albert_tf.models.pretrainer import (
    LOSS_TERM_KEYS,
    AlbertPretrainer,
    pretraining_loss_terms,
)
from albert_tf.training.common import (
    EVAL_RESULTS_FILENAME,
    DatasetFn,
    TrainingError,
    write_eval_results,
    write_scalar_summary,
)
from albert_tf.training.reporting import losses_from_sums
from albert_tf.training.state import warm_start

# evaluate()'s result names (the original's eval_results.txt keys) for the
# `pretraining_losses` names.
_RESULT_NAMES = {
    "mlm_accuracy": "masked_lm_accuracy",
    "mlm_loss": "masked_lm_loss",
    "sop_accuracy": "sentence_order_accuracy",
    "sop_loss": "sentence_order_loss",
    "loss": "loss",
}


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
        `albert_tf.pretraining_losses` over the whole evaluation under the
        original's names: masked_lm_accuracy (weighted by masked_lm_weights),
        masked_lm_loss, sentence_order_accuracy, sentence_order_loss, loss
        (their sum, the original's total), and num_examples.
    """
    strategy = strategy or tf.distribute.get_strategy()
    dataset = strategy.distribute_datasets_from_function(eval_dataset_fn)

    def replica_fn(batch):
        outputs = pretrainer(batch, training=False)
        return pretraining_loss_terms(batch, outputs)

    @tf.function
    def run(iterator):
        sums = tf.zeros([len(LOSS_TERM_KEYS)])
        for _ in tf.range(max_eval_steps):
            optional = iterator.get_next_as_optional()
            if not optional.has_value():
                break
            terms = strategy.run(replica_fn, args=(optional.get_value(),))
            sums += tf.stack([
                strategy.reduce(tf.distribute.ReduceOp.SUM, terms[k], axis=None)
                for k in LOSS_TERM_KEYS])
        return sums

    sums = dict(zip(LOSS_TERM_KEYS, run(iter(dataset)).numpy().tolist()))
    if sums["num_examples"] == 0:
        raise TrainingError("The evaluation data yielded no example.")
    losses = losses_from_sums(sums)
    results: Dict[str, Any] = {
        name: losses[key] for key, name in _RESULT_NAMES.items()}
    results["num_examples"] = int(sums["num_examples"])
    return results


def _training_checkpoint(path: str) -> Optional[str]:
    """The prefix of a training checkpoint of this loop at `path`, else None."""
    prefix = path
    if tf.io.gfile.isdir(path) and not tf.io.gfile.exists(path + ".index"):  # ram:// calls prefixes folders
        prefix = tf.train.latest_checkpoint(path)
    if not prefix or not tf.io.gfile.exists(prefix + ".index"):
        return None
    from albert_tf.checkpoints import checkpoint_variable_names

    names = set(checkpoint_variable_names(prefix))
    return prefix if "global_step/.ATTRIBUTES/VARIABLE_VALUE" in names else None


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
            checkpoint is evaluated when `checkpoint` is not given.
        checkpoint: anything `albert_tf.load_checkpoint` reads; when given it
            is the one evaluated, whatever output_dir holds.
        strategy: the `tf.distribute.Strategy` (default: the current one).
        max_eval_steps: batches at most.
        mixed_precision: "auto", "float32", "bfloat16" or "float16".

    Returns:
        The results written (see `evaluate`), with global_step (the training
        checkpoint's step; 0 for weights without one) and checkpoint.
    """
    strategy = strategy or tf.distribute.get_strategy()
    path = checkpoint or (tf.train.latest_checkpoint(output_dir)
                          if tf.io.gfile.exists(output_dir) else None)
    if not path:
        raise TrainingError(
            f"Nothing to evaluate: no checkpoint in {output_dir!r} and no "
            "checkpoint given.")
    precision = runtime.resolve_mixed_precision(mixed_precision)
    with strategy.scope():
        pretrainer = AlbertPretrainer(
            config, dtype=runtime.dtype_policy_name(precision))
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    prefix = _training_checkpoint(path)
    if prefix:  # a training checkpoint of this loop: weights and step
        tf.train.Checkpoint(model=pretrainer, global_step=global_step).read(
            prefix).assert_existing_objects_matched().expect_partial()
        path = prefix
    else:
        warm_start(pretrainer, path, config)
    results = evaluate(pretrainer, eval_dataset_fn, strategy, max_eval_steps)
    results["global_step"] = int(global_step.numpy())
    if runtime.is_chief(strategy):
        tf.io.gfile.makedirs(output_dir)
        write_eval_results(os.path.join(output_dir, EVAL_RESULTS_FILENAME),
                           results)
    logging.info("Evaluation of %s: %s", path, results)
    return dict(results, checkpoint=path)


def final_evaluation(pretrainer: AlbertPretrainer, eval_dataset_fn: DatasetFn,
                     strategy: tf.distribute.Strategy, max_eval_steps: int,
                     global_step: int, output_dir: str,
                     chief: bool) -> Dict[str, Any]:
    """Evaluates after training: eval_results.txt and eval/ summaries."""
    results = evaluate(pretrainer, eval_dataset_fn, strategy,
                       max_eval_steps=max_eval_steps)
    results["global_step"] = global_step
    if chief:
        write_eval_results(os.path.join(output_dir, EVAL_RESULTS_FILENAME),
                           results)
        eval_writer = tf.summary.create_file_writer(
            os.path.join(output_dir, "eval"))
        with eval_writer.as_default(step=global_step):
            for key, value in results.items():
                write_scalar_summary(key, value)
        eval_writer.flush()
    logging.info("Evaluation at step %d: %s", global_step, results)
    return results
