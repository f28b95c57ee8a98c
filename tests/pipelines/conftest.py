"""Shared fixtures of the pipeline tests: a small generated corpus and a tiny
SentencePiece model trained from it (once per session)."""

import os

import numpy as np
import pytest

SYLLABLES = ["ka", "lo", "mi", "ten", "ser", "qua", "vi", "don", "pra", "el", "nu", "ros",
             "tia", "ge", "bar"]


def write_corpus(path, num_docs=120, seed=0, min_sentences=2, max_sentences=12):
    """Documents of made-up words (several pieces each), one sentence per line."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(SYLLABLES, size=rng.integers(1, 4))) for _ in range(300)]
    words += ["the", "a", "of", "and", "in", "1,", "2019", ","]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(num_docs):
            for _ in range(int(rng.integers(min_sentences, max_sentences + 1))):
                sentence = " ".join(rng.choice(words, size=int(rng.integers(3, 25))))
                f.write(sentence.capitalize() + ".\n")
            f.write("\n")
    return path


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("pipelines_data"))


@pytest.fixture(scope="session")
def corpus_file(data_dir):
    return write_corpus(os.path.join(data_dir, "corpus.txt"))


@pytest.fixture(scope="session")
def spm_model(data_dir, corpus_file):
    from pipelines import tokenizer

    return tokenizer.train_sentencepiece([corpus_file], os.path.join(data_dir, "sp"),
                                         vocab_size=120, seed=1)


@pytest.fixture(scope="session")
def vocab(spm_model):
    from pipelines import tokenizer

    return tokenizer.SentencePieceVocab.from_file(spm_model)
