"""albert-create-vocab: the binary writes a model with the ALBERT special ids."""

import os
import subprocess
import sys

from pipelines import tokenizer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_create_vocab_binary(tmp_path, corpus_file):
    prefix = str(tmp_path / "vocab")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.bin.create_vocab", f"--input_file={corpus_file}",
         f"--model_prefix={prefix}", "--vocab_size=100", "--nodo_lower_case"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.path.exists(prefix + ".vocab")
    vocab = tokenizer.SentencePieceVocab.from_file(prefix + ".model")
    assert vocab.vocab_size == 100
    # --nodo_lower_case keeps the capitals of the sentence starts.
    assert any(p.lstrip("\u2581")[:1].isupper() for p in vocab.pieces[5:])
