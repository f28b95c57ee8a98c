"""Stage 4, pretraining: a small all-shared ALBERT (E < H) with LAMB for a step budget.

flags/recipes/small_pretrain.cfg's learning rate, warmup and 40% dynamic
masking; --minutes is only a safety cap, announced loudly when it cuts
training short. The run resumes from OUT/model's latest checkpoint. Progress is
one line per tenth of the budget (`progress_line`).

Example:

>>> progress_line({"step": 500, "mlm_accuracy": 0.1512, "loss": 4.31, "examples_per_second": 147.2,
...                "eta_seconds": 361.0}, total_steps=1500, batch_size=64)
'step 500/1500, mlm_acc 0.15, loss 4.31, 2.3 steps/s, ETA 6 min'
"""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple

from albert_tf.demo.console import Console, format_minutes
from albert_tf.demo.settings import MAX_PREDICTIONS_PER_SEQ, DemoSettings

LOG_STEPS = 50


def demo_config(vocab_size: int, max_seq_length: int):
    """A small all-shared ALBERT with a factorized embedding (E=64 < H=128).

    Sized for a 2-core CPU: about 3 steps/s at batch 64 x 64 tokens on a
    quiet machine; 1,500 steps reach a held-out MLM accuracy well above the
    most-frequent-piece baseline (bench/results/demo_quality.md).

    Example:
    >>> config = demo_config(6000, 64)
    >>> config.embedding_size < config.hidden_size, config.sharing
    (True, 'all')
    """
    import albert_tf

    return albert_tf.AlbertConfig(
        vocab_size=vocab_size,
        embedding_size=64,
        hidden_size=128,
        num_hidden_layers=4,
        num_hidden_groups=1,
        inner_group_num=1,
        num_attention_heads=2,
        intermediate_size=512,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=max(64, max_seq_length),
        sharing="all",
    )


def progress_line(metrics: Dict[str, Any], total_steps: int, batch_size: int) -> str:
    """One progress line from the metrics `run_pretraining` passes its log_callback."""
    steps_per_second = metrics["examples_per_second"] / batch_size
    return (f"step {metrics['step']}/{total_steps}, mlm_acc {metrics['mlm_accuracy']:.2f}, "
            f"loss {metrics['loss']:.2f}, {steps_per_second:.1f} steps/s, "
            f"ETA {format_minutes(metrics['eta_seconds'])}")


def _progress_printer(console: Console, total_steps: int, batch_size: int):
    """A log_callback that prints every tenth of the budget (at log steps) and the last step."""
    every = max(LOG_STEPS, round(total_steps / 10 / LOG_STEPS) * LOG_STEPS)

    def callback(metrics: Dict[str, Any]) -> None:
        step = int(metrics["step"])
        if step % every == 0 or step >= total_steps or metrics.get("eta_seconds", 1.0) <= 0:
            console.say("%s", progress_line(metrics, total_steps, batch_size))

    return callback


def _dataset_fns(settings: DemoSettings, config, train_pattern: str, eval_pattern: str):
    """(train, eval) dataset functions over the shards: dynamic masking for training, the shards' masks for eval."""
    import pipelines

    def train_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            train_pattern,
            ctx.get_per_replica_batch_size(settings.train_batch_size),
            settings.max_seq_length,
            MAX_PREDICTIONS_PER_SEQ,
            is_training=True,
            masking="dynamic",
            masked_lm_prob=settings.masked_lm_prob,
            seed=settings.random_seed,
            input_context=ctx,
            vocab_size=config.vocab_size,
            type_vocab_size=config.type_vocab_size,
        )

    def eval_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            eval_pattern,
            ctx.get_per_replica_batch_size(64),
            settings.max_seq_length,
            MAX_PREDICTIONS_PER_SEQ,
            is_training=False,
            input_context=ctx,
            vocab_size=config.vocab_size,
            type_vocab_size=config.type_vocab_size,
        )

    return train_dataset_fn, eval_dataset_fn


def pretraining_stage(settings: DemoSettings, console: Console, vocab_size: int, spm_model: str,
                      train_pattern: str, eval_pattern: str) -> Tuple[dict, str, str]:
    """Stage 4: pretrains (or resumes) for the step budget, then evaluates on the held-out shards.

    Returns:
        (run_pretraining's result, the model folder, the precision used).
    """
    import albert_tf
    from albert_tf import runtime, training

    precision = runtime.resolve_mixed_precision(settings.mixed_precision)
    config = demo_config(vocab_size, settings.max_seq_length)
    data = training.PretrainingDataConfig(
        max_seq_length=settings.max_seq_length,
        max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ,
        max_eval_steps=1000,
        masking="dynamic",
        masked_lm_prob=settings.masked_lm_prob,
    )
    console.stage(4, "pretraining", "ALBERT all-shared, E=%d, H=%d, L=%d, %s parameters, %s; %d LAMB steps of %d "
                  "sequences, %d masked positions per row (dynamic masking at %g); safety cap %s" % (
                      config.embedding_size, config.hidden_size, config.num_hidden_layers,
                      f"{albert_tf.AlbertEncoder(config).count_params():,}", precision, settings.pretrain_steps,
                      settings.train_batch_size, data.train_predictions_per_seq(), settings.masked_lm_prob,
                      format_minutes(settings.minutes * 60)))
    train_dataset_fn, eval_dataset_fn = _dataset_fns(settings, config, train_pattern, eval_pattern)
    model_dir = os.path.join(settings.output_dir, "model")
    result = training.run_pretraining(
        config,
        train_dataset_fn,
        model_dir,
        optimization=training.OptimizationConfig(
            train_batch_size=settings.train_batch_size,
            num_train_steps=settings.pretrain_steps,
            optimizer="lamb",
            learning_rate=settings.learning_rate,
            num_warmup_steps=settings.warmup_steps_for_budget(),
        ),
        runtime=training.RuntimeConfig(
            mixed_precision=precision,
            # XLA loses on CPUs (with bfloat16 it halves throughput where the
            # CPU has avx512_bf16: bench/results/avx512-bf16.md); it pays off on GPUs.
            jit_compile=runtime.default_jit_compile(),
            save_checkpoints_steps=250,
            log_steps=LOG_STEPS,
            seed=settings.random_seed,
            max_train_seconds=settings.minutes * 60,
        ),
        data=data,
        spm_model_file=spm_model,
        eval_dataset_fn=eval_dataset_fn,
        log_callback=_progress_printer(console, settings.pretrain_steps, settings.train_batch_size),
    )
    steps = int(result["global_step"])
    console.say("%d of %d steps, done in %s.", steps, settings.pretrain_steps, format_minutes(console.elapsed()))
    if steps < settings.pretrain_steps:
        console.warn(
            "PRETRAINING WAS CUT SHORT by the %s safety cap: %d of %d steps (the machine is slower or busier than "
            "a quiet 2-core CPU). The model is undertrained; re-run the same command with a larger --minutes to "
            "finish the remaining steps (it resumes).", format_minutes(settings.minutes * 60), steps,
            settings.pretrain_steps)
    return result, model_dir, precision
