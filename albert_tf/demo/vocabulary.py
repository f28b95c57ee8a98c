"""Stage 2, the vocabulary: a SentencePiece model trained on the training documents (albert-create-vocab's
settings), at OUT/vocab/spm.model; its .model file appears last, when complete, so a rerun finds it whole.
"""

from __future__ import annotations

import os
from typing import Tuple

from albert_tf.demo.console import Console, format_minutes
from albert_tf.demo.settings import DemoSettings


def vocabulary_stage(settings: DemoSettings, console: Console, train_txt: str) -> Tuple[str, int]:
    """Stage 2: trains (or finds) the SentencePiece model; returns (its path, its vocabulary size)."""
    import tensorflow as tf

    import pipelines

    console.stage(2, "vocabulary", "a SentencePiece model of at most %d pieces" % settings.vocab_size)
    spm_prefix = os.path.join(settings.output_dir, "vocab", "spm")
    spm_model = spm_prefix + ".model"
    if tf.io.gfile.exists(spm_model):
        console.say("Vocabulary already at %s.", spm_model)
    else:
        tf.io.gfile.makedirs(os.path.dirname(spm_prefix))
        pipelines.train_sentencepiece(
            [train_txt],
            spm_prefix + ".tmp",
            vocab_size=settings.vocab_size,
            seed=settings.random_seed,
            extra_options={"hard_vocab_limit": False},
        )
        for ext in (".vocab", ".model"):  # the .model last: its presence marks completion
            tf.io.gfile.rename(spm_prefix + ".tmp" + ext, spm_prefix + ext, overwrite=True)
    vocab_size = pipelines.SentencePieceVocab.from_file(spm_model).vocab_size
    console.say("%d pieces (%s).", vocab_size, format_minutes(console.elapsed()))
    return spm_model, vocab_size
