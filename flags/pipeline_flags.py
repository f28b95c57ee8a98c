"""absl flags of the data binaries (albert-create-vocab, albert-create-pretraining-data).

Names and defaults follow the original create_pretraining_data.py / spm_train
where it has them.  Import as `from flags import pipeline_flags` (the package is
not absl's `flags`).
"""

from absl import flags


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
    flags.mark_flags_as_required(["input_file", "model_prefix"])


def define_create_pretraining_data_flags() -> None:
    """Flags of albert-create-pretraining-data."""
    flags.DEFINE_string("input_file", None,
                        "Input text (one sentence per line, blank line between documents; "
                        ".gz accepted): files or globs, comma-separated.")
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model (albert-create-vocab).")
    flags.DEFINE_string("output_dir", None, "Directory of the output shards.")
    flags.DEFINE_integer("max_seq_length", 512, "Maximum sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked tokens per sequence.")
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
    flags.DEFINE_integer("ngram", 3, "Maximum n-gram (in words) to mask.")
    flags.DEFINE_integer("dupe_factor", 40, "Passes over the input with different masks.")
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
    flags.DEFINE_integer("random_seed", 12345, "Seed of every random choice.")
    flags.DEFINE_integer("num_shards", 1, "Number of output shards.")
    flags.DEFINE_integer("shard_index", 0,
                         "This worker's index in [0, num_workers): it writes the shards s with "
                         "s %% num_workers == shard_index.")
    flags.DEFINE_integer("num_workers", 1, "Number of independent worker processes.")
    flags.DEFINE_bool("random_next_sentence", False, "NSP (random-document B) instead of SOP.")
    flags.DEFINE_bool("single_segment_random_negatives", False,
                      "The original's behaviour for one-segment chunks: a random-document B "
                      "labelled 1 (its issue #234). Default: pure SOP, the segment is split.")
    flags.DEFINE_bool("favor_shorter_ngram", True, "p(n) proportional to 1/n (else reversed).")
    flags.DEFINE_bool("do_whole_word_mask", True, "Mask whole words.")
    flags.DEFINE_bool("do_lower_case", True, "Lowercase the input text.")
    flags.DEFINE_enum("output_compression", "", ["", "GZIP"], "Compression of the shards.")
    flags.DEFINE_integer("shuffle_buffer_size", 100_000,
                         "Records in each shard's shuffle buffer (bounds memory).")
    flags.DEFINE_integer("max_line_bytes", 65536, "Longer lines are skipped and counted.")
    flags.DEFINE_integer("max_document_lines", 20000, "Longer documents are cut.")
    flags.DEFINE_integer("docs_per_batch", 32, "Documents per vectorised processing call.")
    flags.DEFINE_float("progress_interval_s", 30.0, "Seconds between progress lines.")
    flags.mark_flags_as_required(["input_file", "spm_model_file", "output_dir"])
