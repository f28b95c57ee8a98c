"""albert-create-vocab: a SentencePiece vocabulary with the original ALBERT settings.

    albert-create-vocab --input_file=corpus/*.txt --model_prefix=30k-clean --vocab_size=30000

Writes exactly --vocab_size pieces (the original's setting), so that a model
config of that vocab_size fits it; when the text makes fewer, it stops in one
line naming the most it makes. --nohard_vocab_limit writes at most
--vocab_size pieces and logs the count.
"""

from __future__ import annotations

import re

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
            num_threads=FLAGS.num_threads, extra_options={"hard_vocab_limit": FLAGS.hard_vocab_limit})
    except RuntimeError as e:
        # SentencePiece's trainer reports bad settings as RuntimeError("INTERNAL: file(line) [check] message").
        detail = str(e).split("] ", 1)[-1].strip()
        raise ValueError(too_few_pieces_hint(FLAGS.vocab_size, detail)
                         or f"SentencePiece training failed (--vocab_size={FLAGS.vocab_size}): {detail}") from e
    vocab = tokenizer.SentencePieceVocab.from_file(path)
    logging.info("Wrote %s (%d pieces) and %s.vocab.", path, vocab.vocab_size, FLAGS.model_prefix)
    if vocab.vocab_size != FLAGS.vocab_size:
        logging.info("%d pieces, fewer than --vocab_size=%d (--nohard_vocab_limit): give albert-pretrain "
                     "--vocab_size=%d.", vocab.vocab_size, FLAGS.vocab_size, vocab.vocab_size)


def too_few_pieces_hint(vocab_size: int, detail: str) -> str | None:
    """The one-line advice when SentencePiece says the text makes fewer than `vocab_size` pieces, else None.

    Args:
        vocab_size: the --vocab_size asked for.
        detail: SentencePiece's message, e.g. "Vocabulary size too high (30000). Please set it to a value <= 135."

    Example:

    >>> too_few_pieces_hint(30000, "Vocabulary size too high (30000). Please set it to a value <= 6679.")[:75]
    '--vocab_size=30000 is more pieces than this text makes (at most 6679): give'
    >>> too_few_pieces_hint(30000, "something else") is None
    True
    """
    found = re.search(r"too high \(\d+\)\. Please set it to a value <= (\d+)", detail)
    if not found:
        return None
    most = int(found.group(1))
    return (f"--vocab_size={vocab_size} is more pieces than this text makes (at most {most}): give "
            f"--vocab_size={most} or less (and albert-pretrain the same --vocab_size), or --nohard_vocab_limit "
            f"for at most {vocab_size} pieces (the count is logged), or more text.")


def run() -> None:
    """Console-script entry point (setup.py: albert-create-vocab)."""
    from albert_tf.bin.common import run_binary

    run_binary(main, pipeline_flags.define_create_vocab_flags, "albert-create-vocab", __doc__)


if __name__ == "__main__":
    run()
