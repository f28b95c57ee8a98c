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


def test_hard_vocab_limit_refuses_or_caps_in_one_line(tmp_path, corpus_file):
    """The session's small corpus makes at most ~135 pieces: 30,000 is refused in one line naming that count,
    and --nohard_vocab_limit writes that many, logging the count to give albert-pretrain."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    prefix = str(tmp_path / "vocab")
    command = [sys.executable, "-m", "pipelines.bin.create_vocab", f"--input_file={corpus_file}",
               f"--model_prefix={prefix}", "--vocab_size=30000"]
    refused = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert refused.returncode == 1 and not os.path.exists(prefix + ".model")
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("albert-create-vocab: --vocab_size=30000 is more pieces than this text makes (at most "), last
    most = int(last.split("(at most ")[1].split(")")[0])
    assert f"give --vocab_size={most} or less" in last and "--nohard_vocab_limit" in last

    capped = subprocess.run(command + ["--nohard_vocab_limit"], capture_output=True, text=True, env=env, timeout=300)
    assert capped.returncode == 0, capped.stderr[-3000:]
    pieces = tokenizer.SentencePieceVocab.from_file(prefix + ".model").vocab_size
    assert pieces == most  # the most this text makes, which the refusal named
    assert f"{pieces} pieces, fewer than --vocab_size=30000 (--nohard_vocab_limit): give albert-pretrain " \
           f"--vocab_size={pieces}." in capped.stderr
