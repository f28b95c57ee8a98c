"""albert-create-vocab: a SentencePiece vocabulary with the original ALBERT settings.

    albert-create-vocab --input_file=corpus/*.txt --model_prefix=30k-clean --vocab_size=30000
"""

from absl import app
from absl import flags
from absl import logging

from flags import pipeline_flags

FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]!r}")
    if not FLAGS.input_file or not FLAGS.model_prefix:
        raise app.UsageError("--input_file and --model_prefix are required.")
    from pipelines import tokenizer  # here, not at import: see albert_tf/bin/common.py

    try:
        path = tokenizer.train_sentencepiece(
            FLAGS.input_file.split(","), FLAGS.model_prefix, vocab_size=FLAGS.vocab_size,
            do_lower_case=FLAGS.do_lower_case, input_sentence_size=FLAGS.input_sentence_size,
            seed=FLAGS.random_seed, character_coverage=FLAGS.character_coverage,
            num_threads=FLAGS.num_threads)
    except RuntimeError as e:
        # SentencePiece's trainer reports bad settings as RuntimeError("INTERNAL: file(line) [check] message").
        detail = str(e).split("] ", 1)[-1].strip()
        raise ValueError(f"SentencePiece training failed (--vocab_size={FLAGS.vocab_size}): {detail}") from e
    vocab = tokenizer.SentencePieceVocab.from_file(path)
    logging.info("Wrote %s (%d pieces) and %s.vocab.", path, vocab.vocab_size, FLAGS.model_prefix)


def run() -> None:
    """Console-script entry point (setup.py: albert-create-vocab)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, pipeline_flags.define_create_vocab_flags, "albert-create-vocab", __doc__)


if __name__ == "__main__":
    run()
