r"""albert-pretrain: pretrain ALBERT (masked LM + sentence order) on TFRecord shards.

The paper's recipe for ALBERT-base (batch 4096, LAMB, lr 0.00176, 125k steps):

    albert-pretrain --flagfile=flags/recipes/albert_base_pretrain.cfg \
      --input_file='data/*.tfrecord' --output_dir=runs/base \
      --spm_model_file=data/30k-clean.model

On small hardware keep --train_batch_size and raise
--gradient_accumulation_steps; several GPUs: --strategy=mirrored; several hosts:
--strategy=multi_worker_mirrored with TF_CONFIG on every host; TPU:
--strategy=tpu --tpu=NAME. Running the same command again resumes from the
latest checkpoint in --output_dir. --do_eval writes eval_results.txt.
"""

from __future__ import annotations

import os

from absl import app, flags, logging

import flags.core_flags as albert_flags

FLAGS = flags.FLAGS


def _check_input(patterns: str | None, flag: str) -> list[str]:
    """The files of a comma-separated glob list; usage errors when none/empty."""
    import tensorflow as tf

    files = []
    for pattern in (patterns or "").split(","):
        if pattern.strip():
            files.extend(sorted(tf.io.gfile.glob(pattern.strip())))
    if not patterns:
        raise app.UsageError(f"--{flag} is required.")
    if not files:
        raise app.UsageError(f"--{flag}={patterns!r} matches no file.")
    if all(tf.io.gfile.stat(f).length == 0 for f in files):
        raise app.UsageError(
            f"--{flag}={patterns!r}: all {len(files)} file(s) are empty.")
    return files


def _model_config():
    import albert_tf

    if bool(FLAGS.preset) == bool(FLAGS.albert_config_file):
        raise app.UsageError(
            "Give exactly one of --preset and --albert_config_file "
            f"(got preset={FLAGS.preset!r}, "
            f"albert_config_file={FLAGS.albert_config_file!r}).")
    if FLAGS.preset:
        return albert_tf.AlbertConfig.from_preset(FLAGS.preset)
    if not os.path.exists(FLAGS.albert_config_file):
        raise app.UsageError(
            f"--albert_config_file={FLAGS.albert_config_file!r} does not exist.")
    return albert_tf.AlbertConfig.from_json_file(FLAGS.albert_config_file)


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required.")
    if not (FLAGS.do_train or FLAGS.do_eval):
        raise app.UsageError("Nothing to do: --do_train and --do_eval are off.")
    config = _model_config()
    if FLAGS.do_train:
        _check_input(FLAGS.input_file, "input_file")
    eval_pattern = FLAGS.eval_input_file or FLAGS.input_file
    if FLAGS.do_eval:
        _check_input(eval_pattern, "eval_input_file")
    if FLAGS.spm_model_file and not os.path.exists(FLAGS.spm_model_file):
        raise app.UsageError(
            f"--spm_model_file={FLAGS.spm_model_file!r} does not exist.")

    import pipelines
    from albert_tf import training

    strategy = training.get_strategy(FLAGS.strategy, tpu=FLAGS.tpu,
                                     num_gpus=FLAGS.num_gpus)
    logging.info("Strategy %s with %d replica(s)", FLAGS.strategy,
                 strategy.num_replicas_in_sync)

    def train_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            FLAGS.input_file, ctx.get_per_replica_batch_size(
                FLAGS.train_batch_size),
            FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
            is_training=True, masking=FLAGS.masking, seed=FLAGS.seed,
            input_context=ctx, vocab_size=config.vocab_size)

    def eval_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            eval_pattern, ctx.get_per_replica_batch_size(FLAGS.eval_batch_size),
            FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
            is_training=False, masking="static", seed=FLAGS.seed,
            input_context=ctx)

    if FLAGS.do_eval and FLAGS.eval_batch_size % strategy.num_replicas_in_sync:
        raise app.UsageError(
            f"--eval_batch_size={FLAGS.eval_batch_size} is not a multiple of "
            f"the {strategy.num_replicas_in_sync} replicas.")

    try:
        if FLAGS.do_train:
            result = training.run_pretraining(
                config, train_dataset_fn, FLAGS.output_dir,
                train_batch_size=FLAGS.train_batch_size,
                num_train_steps=FLAGS.num_train_steps,
                max_seq_length=FLAGS.max_seq_length,
                max_predictions_per_seq=FLAGS.max_predictions_per_seq,
                optimizer=FLAGS.optimizer,
                learning_rate=FLAGS.learning_rate,
                num_warmup_steps=FLAGS.num_warmup_steps,
                start_warmup_step=FLAGS.start_warmup_step,
                poly_power=FLAGS.poly_power,
                weight_decay_rate=FLAGS.weight_decay_rate,
                clip_norm=FLAGS.clip_norm,
                gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
                mixed_precision=FLAGS.mixed_precision,
                jit_compile=FLAGS.jit_compile,
                save_checkpoints_steps=FLAGS.save_checkpoints_steps,
                keep_checkpoint_max=FLAGS.keep_checkpoint_max,
                log_steps=FLAGS.log_steps,
                init_checkpoint=FLAGS.init_checkpoint,
                spm_model_file=FLAGS.spm_model_file,
                eval_dataset_fn=eval_dataset_fn if FLAGS.do_eval else None,
                max_eval_steps=FLAGS.max_eval_steps,
                strategy=strategy,
                seed=FLAGS.seed)
        else:
            result = training.run_evaluation(
                config, eval_dataset_fn, FLAGS.output_dir,
                checkpoint=FLAGS.init_checkpoint, strategy=strategy,
                max_eval_steps=FLAGS.max_eval_steps,
                mixed_precision=FLAGS.mixed_precision)
    except training.TrainingError as e:
        logging.error("%s", e)
        raise SystemExit(f"albert-pretrain: {e}") from None
    result.pop("model", None)
    logging.info("Done: %s", result)


def run() -> None:
    """Console-script entry point (setup.py: albert-pretrain)."""
    # Flags are defined here, not at import, so that importing several
    # binaries in one process (tests) cannot collide.
    albert_flags.define_all_pretraining_flags()
    flags.adopt_module_key_flags(albert_flags)  # list them in --helpshort
    app.run(main)


if __name__ == "__main__":
    run()
