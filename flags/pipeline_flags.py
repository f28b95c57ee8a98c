"""absl flags of the data binaries (albert-create-vocab, albert-create-pretraining-data).

Names and defaults follow the original create_pretraining_data.py / spm_train
where it has them.  Import as `from flags import pipeline_flags` (the package is
not absl's `flags`).
"""

from absl import flags

# Flags of albert-create-pretraining-data that are PretrainingDataConfig fields
# (the rest: inputs, outputs and the worker split).
PRETRAINING_DATA_CONFIG_FLAGS = (
    "max_seq_length", "dupe_factor", "short_seq_prob", "random_next_sentence",
    "single_segment_random_negatives", "random_seed", "max_predictions_per_seq",
    "masked_lm_prob", "ngram", "favor_shorter_ngram", "do_whole_word_mask", "do_lower_case",
    "max_line_bytes", "max_document_lines", "num_shards", "output_compression",
    "shuffle_buffer_size", "docs_per_batch", "progress_interval_s",
)


# --runner of albert-create-pretraining-data (pipelines/beam_pipeline.py).
BEAM_RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner",
                "PortableRunner", "PrismRunner")


def define_create_vocab_flags() -> None:
    """Flags of albert-create-vocab."""
    flags.DEFINE_string("input_file", None, "Input text files or globs, comma-separated.")
    flags.DEFINE_string("model_prefix", None, "Writes PREFIX.model and PREFIX.vocab.")
    flags.DEFINE_integer("vocab_size", 30000, "Vocabulary size.")
    flags.DEFINE_bool("do_lower_case", True, "Lowercase the text before training.")
    flags.DEFINE_integer("input_sentence_size", 10_000_000,
                         "Sentences sampled (reservoir) for training.")
    flags.DEFINE_float("character_coverage", 0.99995, "SentencePiece character coverage.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of SentencePiece's sampling.")
    flags.DEFINE_integer("num_threads", 2, "SentencePiece trainer threads.")
    flags.DEFINE_bool("hard_vocab_limit", True,
                      "Exactly --vocab_size pieces (the original's and SentencePiece's default; a model "
                      "config's vocab_size must equal the count), else an error naming the most this text "
                      "makes. --nohard_vocab_limit: at most --vocab_size (fewer on a small corpus; the "
                      "count is logged; give it to albert-pretrain as --vocab_size).")
    flags.mark_flags_as_required(["input_file", "model_prefix"])


def define_create_pretraining_data_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Flags of albert-create-pretraining-data (in `flag_values`, default the global FLAGS)."""
    fv = flag_values
    flags.DEFINE_string("input_file", None,
                        "Input text (one sentence per line, blank line between documents; "
                        ".gz accepted): files or globs, comma-separated.", flag_values=fv)
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model (albert-create-vocab).",
                        flag_values=fv)
    flags.DEFINE_string("output_dir", None, "Directory of the output shards.", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", 512, "Maximum sequence length.", flag_values=fv)
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked tokens per sequence.",
                         flag_values=fv)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", flag_values=fv)
    flags.DEFINE_integer("ngram", 3, "Maximum n-gram (in words) to mask.", flag_values=fv)
    flags.DEFINE_integer("dupe_factor", 40, "Passes over the input with different masks.",
                         flag_values=fv)
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.",
                       flag_values=fv)
    flags.DEFINE_integer("random_seed", 12345, "Seed of every random choice.", flag_values=fv)
    flags.DEFINE_integer("num_shards", 1, "Number of output shards.", flag_values=fv)
    flags.DEFINE_integer("shard_index", 0,
                         "This worker's index in [0, num_workers): it writes the shards s with "
                         "s %% num_workers == shard_index.", flag_values=fv)
    flags.DEFINE_integer("num_workers", 1, "Number of independent worker processes.",
                         flag_values=fv)
    flags.DEFINE_bool("random_next_sentence", False, "NSP (random-document B) instead of SOP.",
                      flag_values=fv)
    flags.DEFINE_bool("single_segment_random_negatives", False,
                      "The original's behaviour for one-segment chunks: a random-document B "
                      "labelled 1 (its issue #234). Default: pure SOP, the segment is split.",
                      flag_values=fv)
    flags.DEFINE_bool("favor_shorter_ngram", True, "p(n) proportional to 1/n (else reversed).",
                      flag_values=fv)
    flags.DEFINE_bool("do_whole_word_mask", True, "Mask whole words.", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Lowercase the input text.", flag_values=fv)
    flags.DEFINE_enum("output_compression", "", ["", "GZIP"], "Compression of the shards.",
                      flag_values=fv)
    flags.DEFINE_integer("shuffle_buffer_size", 100_000,
                         "Records in each shard's shuffle buffer (bounds memory).", flag_values=fv)
    flags.DEFINE_integer("max_line_bytes", 65536, "Longer lines are skipped and counted.",
                         flag_values=fv)
    flags.DEFINE_integer("max_document_lines", 20000, "Longer documents are cut.", flag_values=fv)
    flags.DEFINE_integer("docs_per_batch", 32, "Documents per vectorised processing call.",
                         flag_values=fv)
    flags.DEFINE_float("progress_interval_s", 30.0, "Seconds between progress lines.",
                       flag_values=fv)
    flags.DEFINE_bool("overwrite", False,
                      "Replace shards in --output_dir made with other settings or inputs (its "
                      "manifest says which); without it such a rerun stops with an error. "
                      "Give it to every worker.", flag_values=fv)
    flags.DEFINE_enum("runner", None, list(BEAM_RUNNERS),
                      "Run as an Apache Beam pipeline on this runner (pip install -e '.[beam]', in an "
                      "environment without [openvino] or [bench]), "
                      "with the same shards; Beam options follow a lone --, e.g. "
                      "-- --project=P --region=R --temp_location=gs://B/tmp. Not with "
                      "--num_workers / --shard_index (the runner splits the work).",
                      flag_values=fv)
    flags.mark_flags_as_required(["input_file", "spm_model_file", "output_dir"], flag_values=fv)


def pretraining_data_config(flag_values: flags.FlagValues = flags.FLAGS):
    """The PretrainingDataConfig the parsed flags describe.

    Args:
        flag_values: parsed flags defined by define_create_pretraining_data_flags.

    Returns:
        A pipelines.create.PretrainingDataConfig.
    """
    from pipelines.create import PretrainingDataConfig  # imports TensorFlow: not at load

    return PretrainingDataConfig(
        **{name: flag_values[name].value for name in PRETRAINING_DATA_CONFIG_FLAGS})
