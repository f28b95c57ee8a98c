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
--data_service_address=grpc://HOST:PORT moves the training input to tf.data
service workers (albert-data-service); resume is then not exact.
--spm_model_file must be the vocabulary the shards were made with: another
one than their manifest records is refused in one line naming both files
(--allow_other_vocabulary: a WARNING instead); shards without a manifest are
not checked (a WARNING).

SIGTERM or SIGINT (a preemptible VM, a cluster scheduler, Ctrl-C) finishes
the current step, writes its checkpoint and exits with code 75 (EX_TEMPFAIL)
and one line naming the checkpoint; the same command resumes there exactly
(all workers of a multi-worker run stop at the same step). A second signal
stops at once. Exit codes: 0 done, 1 an error (one line), 75 preempted.

A diverging run (NaN/inf loss) stops in one line naming the last good
checkpoint; --on_nonfinite=rollback instead restores the last checkpoint,
skips the input batches read since (a resumed run skips the same ones) and
goes on, also on a loss spike (--loss_spike_factor x the median of the last
--loss_spike_window losses), with one log line per rollback and at most
--max_rollbacks of them (--rollback_learning_rate_factor lowers the rate).

One writer per --output_dir: a second albert-pretrain on a folder in use is
refused in one line naming the holder (host, pid, since when); see
pipelines/locking.py for the rule (a lock for local folders, a heartbeat lease
for gs:// and other remote ones; a dead holder's lock is taken over).
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
    """The model config and where it came from (for messages), with --vocab_size applied."""
    import dataclasses

    config, source = _config_of_flags()
    if FLAGS.vocab_size is None or FLAGS.vocab_size == config.vocab_size:
        return config, source
    if FLAGS.vocab_size < 1:
        raise app.UsageError(f"--vocab_size={FLAGS.vocab_size} must be a positive number of pieces.")
    logging.info("vocab_size %d (--vocab_size) instead of %s's %d.", FLAGS.vocab_size, source,
                 config.vocab_size)
    return dataclasses.replace(config, vocab_size=FLAGS.vocab_size), f"--vocab_size={FLAGS.vocab_size}"


def _config_of_flags():
    """The config of --preset or --albert_config_file and where it came from."""
    import albert_tf

    if bool(FLAGS.preset) == bool(FLAGS.albert_config_file):
        raise app.UsageError(
            "Give exactly one of --preset and --albert_config_file "
            f"(got preset={FLAGS.preset!r}, "
            f"albert_config_file={FLAGS.albert_config_file!r}).")
    if FLAGS.preset:
        return (albert_tf.AlbertConfig.from_preset(FLAGS.preset),
                f"--preset={FLAGS.preset}")
    import tensorflow as tf  # gfile: the config may be a gs:// URL

    if not tf.io.gfile.exists(FLAGS.albert_config_file):
        raise app.UsageError(
            f"--albert_config_file={FLAGS.albert_config_file!r} does not exist.")
    return (albert_tf.AlbertConfig.from_json_file(FLAGS.albert_config_file),
            f"--albert_config_file={FLAGS.albert_config_file}")


def check_vocabulary(spm_model_file: str, vocab_size: int,
                     config_source: str) -> None:
    """ValueError unless the SentencePiece model has `vocab_size` pieces.

    Ids past the embedding table would be read as zeros on GPU/TPU, silently.
    """
    import sentencepiece

    from pipelines.fileio import read_bytes  # sentencepiece's model_file reads local paths only

    try:
        pieces = sentencepiece.SentencePieceProcessor(
            model_proto=read_bytes(spm_model_file)).get_piece_size()
    except (RuntimeError, OSError) as e:
        raise ValueError(
            f"--spm_model_file={spm_model_file} is not a SentencePiece model "
            f"({str(e).splitlines()[0] if str(e) else type(e).__name__}).") from None
    if pieces != vocab_size:
        raise ValueError(
            f"--spm_model_file={spm_model_file} has {pieces} pieces but "
            f"{config_source} has vocab_size={vocab_size}: use the vocabulary "
            f"the data was made with and give --vocab_size={pieces} (or a model "
            "config of its size).")


def check_shard_lengths(manifests, max_seq_length: int, max_predictions_per_seq: int) -> None:
    """ValueError unless the shards' manifests record the lengths the run reads them with.

    The reader parses fixed-length features: shards of another length fail
    inside tf.data, far from the cause. Manifests without these settings
    (written by hand or by an older tool) are not compared.

    Args:
        manifests: paths of the shards' PREFIX.manifest.json files (the shard check's).
        max_seq_length, max_predictions_per_seq: the run's flags.
    """
    import json

    from pipelines.fileio import read_text

    wanted = {"max_seq_length": max_seq_length, "max_predictions_per_seq": max_predictions_per_seq}
    for path in manifests:
        settings = json.loads(read_text(path)).get("settings") or {}
        differ = [f"--{name}={value} (the shards: {settings[name]})" for name, value in wanted.items()
                  if name in settings and settings[name] != value]
        if differ:
            shards = " ".join(f"--{name}={settings[name]}" for name in wanted if name in settings)
            raise ValueError(f"{' and '.join(differ)}: {path} records the shards' lengths; train with {shards} "
                             "or write shards at this run's lengths.")


def _check_files(config, config_source: str) -> str:
    """The shards against their manifests and the vocabulary against the config; returns the eval pattern."""
    import tensorflow as tf

    from pipelines import shard_check  # sizes (or checksums) vs the manifest, before step 1

    files = []  # every input file read, for the vocabulary check
    lengths = (FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)
    if FLAGS.do_train:
        files += _check_input(FLAGS.input_file, "input_file")
        report = shard_check.verify_input_shards(files, FLAGS.verify_shards, FLAGS.skip_corrupt_records)
        check_shard_lengths(report.manifests, *lengths)
    eval_pattern = FLAGS.eval_input_file or FLAGS.input_file
    if FLAGS.do_eval and eval_pattern != FLAGS.input_file:
        eval_files = _check_input(eval_pattern, "eval_input_file")
        report = shard_check.verify_input_shards(eval_files, FLAGS.verify_shards, FLAGS.skip_corrupt_records)
        check_shard_lengths(report.manifests, *lengths)
        files += eval_files
    elif FLAGS.do_eval:
        files = files or _check_input(eval_pattern, "eval_input_file")
    if FLAGS.spm_model_file:
        if not tf.io.gfile.exists(FLAGS.spm_model_file):
            raise app.UsageError(
                f"--spm_model_file={FLAGS.spm_model_file!r} does not exist.")
        check_vocabulary(FLAGS.spm_model_file, config.vocab_size,
                         config_source)
        _check_shards_vocabulary(files)
    return eval_pattern


def _check_shards_vocabulary(files) -> None:
    """--spm_model_file against the vocabulary the shards' manifests record (albert_tf/vocabulary_check.py):
    another one is refused in one line (VocabularyMismatch), or a WARNING with --allow_other_vocabulary."""
    from albert_tf.vocabulary_check import check_shards_vocabulary

    check_shards_vocabulary(FLAGS.spm_model_file, files, FLAGS.allow_other_vocabulary)


def _check_data_settings(data, training) -> None:
    """Masking and tf.data service settings: usage errors in one line, the choices logged."""
    if data.masking == "dynamic":
        logging.info(
            "Dynamic masking: masked_lm_prob %s, %d masked positions per row",
            data.masked_lm_prob, data.train_predictions_per_seq())
    elif data.masked_lm_prob != 0.15:
        raise app.UsageError(
            f"--masked_lm_prob={data.masked_lm_prob} needs --masking=dynamic "
            "(static masking uses the masks stored in the shards).")

    if data.data_service_address:
        try:
            training.data_service.check_address(data.data_service_address)
            training.data_service.job_name(FLAGS.output_dir)  # refuses a relative path
        except ValueError as e:
            raise app.UsageError(str(e)) from None
        logging.info(
            "Input on the tf.data service at %s, processing mode %s; resume "
            "is not exact: %s.", data.data_service_address,
            training.data_service.PROCESSING_MODE,
            training.data_service.RESUME_NOTE)


def _dataset_fns(config, optimization, run_config, data, eval_pattern: str):
    """(train_dataset_fn, eval_dataset_fn) over the shards, as run_pretraining takes them."""
    import pipelines

    def train_dataset_fn(ctx):
        # With the service, the service splits the files among its workers
        # and every trainer must send the same pipeline: no sharding here.
        return pipelines.pretraining_dataset(
            data.input_file, ctx.get_per_replica_batch_size(
                optimization.train_batch_size),
            data.max_seq_length, data.max_predictions_per_seq,
            is_training=True, masking=data.masking, seed=run_config.seed,
            skip_corrupt_records=FLAGS.skip_corrupt_records,
            masked_lm_prob=data.masked_lm_prob,
            input_context=None if data.data_service_address else ctx,
            vocab_size=config.vocab_size,
            type_vocab_size=config.type_vocab_size)

    # Training batches are fixed anyway; static evaluation pads its last batch (a TPU needs it).
    static_eval = FLAGS.static_shapes or FLAGS.strategy == "tpu"
    if static_eval and FLAGS.do_eval:
        logging.info("Static shapes: evaluation batches of %d, the last one filled with padding rows "
                     "that count for nothing.", data.eval_batch_size)

    def eval_dataset_fn(ctx):
        return pipelines.pretraining_dataset(
            eval_pattern, ctx.get_per_replica_batch_size(data.eval_batch_size),
            data.max_seq_length, data.max_predictions_per_seq,
            is_training=False, masking="static", seed=run_config.seed,
            skip_corrupt_records=FLAGS.skip_corrupt_records,
            input_context=ctx, vocab_size=config.vocab_size,
            type_vocab_size=config.type_vocab_size, static_shapes=static_eval)

    return train_dataset_fn, eval_dataset_fn


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required.")
    if not (FLAGS.do_train or FLAGS.do_eval):
        raise app.UsageError("Nothing to do: --do_train and --do_eval are off.")
    config, config_source = _model_config()
    eval_pattern = _check_files(config, config_source)

    from albert_tf import preemption, runtime, training
    from pipelines.locking import FolderLock

    optimization, run_config, data = albert_flags.pretraining_configs(FLAGS)
    recovery = training.RecoveryConfig.from_flags(FLAGS)
    try:
        recovery.validate()
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    try:
        strategy = runtime.get_strategy(FLAGS.strategy, tpu=FLAGS.tpu,
                                        num_gpus=FLAGS.num_gpus,
                                        num_cpu_devices=FLAGS.num_cpu_devices)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    logging.info("Strategy %s with %d replica(s); precision %s",
                 FLAGS.strategy, strategy.num_replicas_in_sync,
                 run_config.resolved_precision())
    _check_data_settings(data, training)
    train_dataset_fn, eval_dataset_fn = _dataset_fns(config, optimization, run_config, data, eval_pattern)
    if FLAGS.do_eval and data.eval_batch_size % strategy.num_replicas_in_sync:
        raise app.UsageError(
            f"--eval_batch_size={data.eval_batch_size} is not a multiple of "
            f"the {strategy.num_replicas_in_sync} replicas.")

    # One writer per --output_dir: the chief locks it (other workers write to
    # scratch folders); a second run is refused naming the holder.
    # A lost lease (remote folders) stops the loop as a signal does.
    lock = (FolderLock(FLAGS.output_dir, "albert-pretrain", on_lost=preemption.request_stop).acquire()
            if runtime.is_chief(strategy) else None)
    try:
        if FLAGS.do_train:
            result = training.run_pretraining(
                config, train_dataset_fn, FLAGS.output_dir,
                optimization=optimization, runtime=run_config, data=data,
                init_checkpoint=FLAGS.init_checkpoint,
                allow_partial_init_checkpoint=FLAGS.allow_partial_init_checkpoint,
                spm_model_file=FLAGS.spm_model_file,
                eval_dataset_fn=eval_dataset_fn if FLAGS.do_eval else None,
                strategy=strategy, recovery=recovery)
        else:
            result = training.run_evaluation(
                config, eval_dataset_fn, FLAGS.output_dir,
                checkpoint=FLAGS.init_checkpoint, strategy=strategy,
                max_eval_steps=data.max_eval_steps,
                mixed_precision=run_config.mixed_precision)
    except training.TrainingError as e:
        logging.error("%s", e)
        raise SystemExit(f"albert-pretrain: {e}") from None
    finally:
        if lock is not None:
            lock.release()
    result.pop("model", None)
    logging.info("Done: %s", result)


def run() -> None:
    """Console-script entry point (setup.py: albert-pretrain)."""
    # Flags are defined here, not at import, so that importing several
    # binaries in one process (tests) cannot collide.
    from albert_tf.bin.common import run_binary

    run_binary(main, albert_flags.define_all_pretraining_flags, "albert-pretrain", __doc__)


if __name__ == "__main__":
    run()
