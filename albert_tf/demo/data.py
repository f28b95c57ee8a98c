"""Stage 3, the pretraining data: TFRecord shards of the training and of the held-out documents, with
sentence-order (SOP) pairs and n-gram masking, written by `pipelines.create_pretraining_data` (resumable:
complete shards are kept on a rerun).

Example:

>>> from pipelines.create.config import PretrainingDataSummary
>>> describe(PretrainingDataSummary(documents=116, instances=656, tokens=37781, masked_tokens=5746,
...                                 label_one=316, shards_written=["a", "b", "c", "d"], seconds=7.4))
'656 instances from 116 documents, 37,781 tokens (15.2% masked, 48.2% of pairs swapped), 4 shard(s) written in 7 s'
"""

from __future__ import annotations

import os
from typing import Tuple

from albert_tf.demo.console import Console, format_minutes
from albert_tf.demo.settings import MAX_PREDICTIONS_PER_SEQ, DemoSettings


def describe(summary) -> str:
    """One line for a `PretrainingDataSummary`."""
    if summary.shards_already_complete and not summary.shards_written:
        return f"{len(summary.shards_already_complete)} shard(s) already complete"
    return (f"{summary.instances:,} instances from {summary.documents:,} documents, {summary.tokens:,} tokens "
            f"({100 * summary.masked_fraction:.1f}% masked, {100 * summary.sop_label_one_fraction:.1f}% of pairs "
            f"swapped), {len(summary.shards_written)} shard(s) written in {format_minutes(summary.seconds)}")


def data_stage(settings: DemoSettings, console: Console, train_txt: str, eval_txt: str,
               spm_model: str) -> Tuple[str, str]:
    """Stage 3: writes (or completes) the shards; returns the globs of the training and the held-out shards."""
    import pipelines

    console.stage(3, "pretraining data", "sentence-order pairs and n-gram masking, %d passes over the training "
                  "documents" % settings.dupe_factor)
    data_dir = os.path.join(settings.output_dir, "data")
    data_config = pipelines.PretrainingDataConfig(
        max_seq_length=settings.max_seq_length,
        max_predictions_per_seq=MAX_PREDICTIONS_PER_SEQ,
        dupe_factor=settings.dupe_factor,
        num_shards=4,
        random_seed=settings.random_seed,
        progress_interval_s=15.0,
    )

    def progress(summary):
        console.say("%s instances from %s documents so far, %.0f instances/s", f"{summary.instances:,}",
                    f"{summary.documents:,}", summary.instances_per_second)

    train_summary = pipelines.create_pretraining_data(
        [train_txt], spm_model, os.path.join(data_dir, "train"), data_config, progress=progress
    )
    console.say("training data: %s.", describe(train_summary))
    eval_summary = pipelines.create_pretraining_data(  # the held-out set: more masks, one shard
        [eval_txt], spm_model, os.path.join(data_dir, "eval"), data_config, dupe_factor=10, num_shards=1,
        progress=progress
    )
    console.say("held-out data: %s.", describe(eval_summary))
    return os.path.join(data_dir, "train", "*.tfrecord"), os.path.join(data_dir, "eval", "*.tfrecord")
