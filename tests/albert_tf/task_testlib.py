"""Shared helpers of the fine-tuning tests: a tiny SentencePiece model, tiny
configs and small labelled data sets (made here, nothing downloaded)."""

import os

import numpy as np

import albert_tf
from tests.pipelines.conftest import write_corpus

SPM_VOCAB_SIZE = 120


_TRAINED_SPM = {}  # vocab_size -> {file suffix: bytes} of the tiny model, trained once per process


def train_tiny_spm(folder: str, vocab_size: int = SPM_VOCAB_SIZE, name: str = "sp") -> str:
    """A SentencePiece model (120 pieces by default; 50 for the golden fixtures' models) with the ALBERT special ids,
    as `folder`/`name`.model (+ .vocab, and corpus.txt).

    Trained once per process and size (about 1 s) and copied into each later `folder`: the corpus and the seed are
    fixed, so every caller gets the same model in a folder of its own.
    """
    from pipelines import tokenizer

    corpus = write_corpus(os.path.join(folder, "corpus.txt"), num_docs=60)
    prefix = os.path.join(folder, name)
    if vocab_size not in _TRAINED_SPM:
        path = tokenizer.train_sentencepiece([corpus], prefix, vocab_size=vocab_size, seed=1)
        _TRAINED_SPM[vocab_size] = {}
        for suffix in (".model", ".vocab"):
            with open(prefix + suffix, "rb") as f:
                _TRAINED_SPM[vocab_size][suffix] = f.read()
        return path
    for suffix, content in _TRAINED_SPM[vocab_size].items():
        with open(prefix + suffix, "wb") as f:
            f.write(content)
    return prefix + ".model"


def tiny_config(dropout: float = 0.0, **overrides) -> albert_tf.AlbertConfig:
    values = dict(vocab_size=SPM_VOCAB_SIZE, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                  num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                  hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    values.update(overrides)
    return albert_tf.AlbertConfig(**values)


def sentences(n: int, seed: int = 0):
    """n short made-up sentences and a binary label (does it mention "ka"?)."""
    rng = np.random.default_rng(seed)
    words = ["ka", "lo", "mi", "ten", "ser", "qua", "vi", "don"]
    texts, labels = [], []
    for _ in range(n):
        row = list(rng.choice(words, size=int(rng.integers(2, 7))))
        texts.append(" ".join(row))
        labels.append(int("ka" in row))
    return texts, np.array(labels, np.int32)
