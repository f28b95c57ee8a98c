"""albert-create-pretraining-data: text -> ALBERT pretraining TFRecord shards.

    albert-create-pretraining-data --input_file=corpus/*.txt
        --spm_model_file=30k-clean.model --output_dir=data --max_seq_length=512
        --dupe_factor=40 --num_shards=256

(one command line; see --helpfull for every flag).

Several processes (any batch scheduler) can share the work with
--num_workers=n --shard_index=i; together they write the files of one run.
Re-running after an interruption writes only the missing shards. The settings
and a fingerprint of the inputs are kept in PREFIX.manifest.json beside the
shards: a rerun with other settings or inputs stops with an error naming what
differs, unless --overwrite (give it to every worker), which replaces the shards.
A second run of the same worker on one --output_dir while the first is alive is
refused in one line naming it (a lock per worker: pipelines/locking.py).

On Apache Beam (pip install -e '.[beam]', not beside [openvino] or [bench]), the same shards:

    albert-create-pretraining-data --runner=DataflowRunner --input_file=gs://B/corpus/*.txt
        --spm_model_file=30k-clean.model --output_dir=gs://B/data --num_shards=1024
        -- --project=P --region=R --temp_location=gs://B/tmp

(Beam pipeline options after a lone --; see pipelines/beam_pipeline.py.)
"""

import sys

from absl import app
from absl import flags
from absl import logging

from flags import pipeline_flags

FLAGS = flags.FLAGS


def _run_beam(beam_args):
    """The Beam pipeline on --runner with the Beam options of `beam_args`."""
    try:
        from pipelines import beam_pipeline
    except ImportError as e:
        raise app.UsageError(
            f"--runner={FLAGS.runner} needs Apache Beam: pip install -e '.[beam]' in the checkout, in an "
            f"environment without [openvino] or [bench] (its protobuf cap breaks transformers' ALBERT "
            f"tokenizer; setup.py) ({e}).") from None
    return beam_pipeline.create_pretraining_data_beam(
        FLAGS.input_file.split(","), FLAGS.spm_model_file, FLAGS.output_dir,
        pipeline_flags.pretraining_data_config(FLAGS),
        beam_args=[f"--runner={FLAGS.runner}", *beam_args], overwrite=FLAGS.overwrite)


def main(argv):
    if len(argv) > 1 and not FLAGS.runner:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]!r}")
    if FLAGS.runner and (FLAGS.num_workers != 1 or FLAGS.shard_index != 0):
        raise app.UsageError(
            f"--runner={FLAGS.runner} splits the work itself: drop --num_workers="
            f"{FLAGS.num_workers} / --shard_index={FLAGS.shard_index}.")
    # TensorFlow is imported here, not at module load (see albert_tf/bin/common.py).
    from pipelines import create
    from pipelines.locking import FolderLock, lock_name

    # One writer per folder, and per worker of --num_workers (each writes its own shards).
    lock = FolderLock(FLAGS.output_dir, "albert-create-pretraining-data",
                      lock_name(FLAGS.shard_index, FLAGS.num_workers)).acquire()
    try:
        if FLAGS.runner:
            summary = _run_beam(argv[1:])
        else:
            summary = create.create_pretraining_data(
                FLAGS.input_file.split(","), FLAGS.spm_model_file, FLAGS.output_dir,
                pipeline_flags.pretraining_data_config(FLAGS), shard_index=FLAGS.shard_index,
                num_workers=FLAGS.num_workers, overwrite=FLAGS.overwrite)
    except (FileNotFoundError, ValueError) as e:
        # Bad input: one clear line, not a TensorFlow stack trace.
        logging.error("%s", e)
        sys.exit(1)
    finally:
        lock.release()
    for line in summary.to_text().splitlines():
        logging.info("%s", line)


def run() -> None:
    """Console-script entry point (setup.py: albert-create-pretraining-data)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, pipeline_flags.define_create_pretraining_data_flags,
               "albert-create-pretraining-data", __doc__)


if __name__ == "__main__":
    run()
