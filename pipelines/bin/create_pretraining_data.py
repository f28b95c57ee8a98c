"""albert-create-pretraining-data: text -> ALBERT pretraining TFRecord shards.

    albert-create-pretraining-data --input_file=corpus/*.txt
        --spm_model_file=30k-clean.model --output_dir=data --max_seq_length=512
        --dupe_factor=40 --num_shards=256

(one command line; see --helpfull for every flag).

Several processes (any batch scheduler) can share the work with
--num_workers=n --shard_index=i; together they write the files of one run.
Re-running after an interruption writes only the missing shards.
"""

import sys

from absl import app
from absl import flags
from absl import logging

from flags import pipeline_flags
from pipelines import create

FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]!r}")
    try:
        summary = create.create_pretraining_data(
            FLAGS.input_file.split(","), FLAGS.spm_model_file, FLAGS.output_dir,
            max_seq_length=FLAGS.max_seq_length,
            max_predictions_per_seq=FLAGS.max_predictions_per_seq,
            masked_lm_prob=FLAGS.masked_lm_prob, ngram=FLAGS.ngram,
            dupe_factor=FLAGS.dupe_factor, short_seq_prob=FLAGS.short_seq_prob,
            random_seed=FLAGS.random_seed, num_shards=FLAGS.num_shards,
            shard_index=FLAGS.shard_index, num_workers=FLAGS.num_workers,
            do_lower_case=FLAGS.do_lower_case, do_whole_word_mask=FLAGS.do_whole_word_mask,
            favor_shorter_ngram=FLAGS.favor_shorter_ngram,
            random_next_sentence=FLAGS.random_next_sentence,
            single_segment_random_negatives=FLAGS.single_segment_random_negatives,
            output_compression=FLAGS.output_compression,
            shuffle_buffer_size=FLAGS.shuffle_buffer_size,
            max_line_bytes=FLAGS.max_line_bytes, max_document_lines=FLAGS.max_document_lines,
            docs_per_batch=FLAGS.docs_per_batch,
            progress_interval_s=FLAGS.progress_interval_s)
    except (FileNotFoundError, ValueError) as e:
        # Bad input: one clear line, not a TensorFlow stack trace.
        logging.error("%s", e)
        sys.exit(1)
    for line in summary.to_text().splitlines():
        logging.info("%s", line)


def run():
    pipeline_flags.define_create_pretraining_data_flags()
    flags.adopt_module_key_flags(pipeline_flags)  # list them in --helpshort
    app.run(main)


if __name__ == "__main__":
    run()
