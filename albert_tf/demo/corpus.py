"""Stage 1, the corpus: train.txt and eval.txt (held-out documents) under OUT/corpus.

The standard library's docstrings (pipelines.stdlib_corpus) or the user's own
files (`split_user_corpus`), one sentence per line, blank lines between
documents; about 5% of the documents are held out, chosen by a seeded hash.

Example:

>>> import os, tempfile
>>> from pipelines.fileio import atomic_write
>>> folder = tempfile.mkdtemp()
>>> with atomic_write(os.path.join(folder, "mine.txt")) as f:
...     _ = f.write("".join(f"Sentence one of {i}.\\nSentence two.\\n\\n" for i in range(200)))
>>> counts = split_user_corpus(os.path.join(folder, "mine.txt"), os.path.join(folder, "corpus"), seed=1)
>>> counts["documents"], counts["train_documents"] + counts["eval_documents"]
(200, 200)
"""

from __future__ import annotations

import collections
import hashlib
import os
from typing import Tuple

from albert_tf.demo.console import Console
from albert_tf.demo.settings import HELDOUT_FRACTION, DemoSettings


def split_user_corpus(patterns: str, corpus_dir: str, seed: int) -> dict:
    """Splits the user's documents into train.txt / eval.txt by a seeded hash of each document's number.

    Args:
        patterns: globs, comma-separated (one sentence per line, blank lines between documents).
        corpus_dir: gets train.txt and eval.txt (written whole, then renamed).
        seed: the split's seed.

    Returns:
        dict with train_file, eval_file and the document counts.

    Raises:
        ValueError: no file matches, or too few documents to hold some out.
    """
    import tensorflow as tf

    # The user's files may be on gs:// or hdfs://: tf.io.gfile reads every file system TensorFlow knows.
    files = sorted({f for p in patterns.split(",") for f in tf.io.gfile.glob(p.strip())})
    if not files:
        raise ValueError(f"--input_file={patterns!r} matches no file.")
    tf.io.gfile.makedirs(corpus_dir)
    paths = {"train": os.path.join(corpus_dir, "train.txt"), "eval": os.path.join(corpus_dir, "eval.txt")}
    counts = collections.Counter()
    handles = {k: tf.io.gfile.GFile(v + ".tmp", "w") for k, v in paths.items()}
    try:
        document = []

        def flush():
            if document:
                digest = hashlib.sha256(f"{seed}:{counts['documents']}".encode()).digest()
                split = "eval" if int.from_bytes(digest[:8], "big") / 2**64 < HELDOUT_FRACTION else "train"
                handles[split].write("\n".join(document) + "\n\n")
                counts["documents"] += 1
                counts[f"{split}_documents"] += 1
                document.clear()

        for path in files:
            with tf.io.gfile.GFile(path, "rb") as f:
                for raw in f:
                    line = raw.decode("utf-8", errors="replace").strip()
                    if line:
                        document.append(line)
                    else:
                        flush()
            flush()
    finally:
        for handle in handles.values():
            handle.close()
    if counts["train_documents"] == 0 or counts["eval_documents"] == 0:
        raise ValueError(
            f"--input_file gave {counts['documents']} document(s); the demo needs enough blank-line separated "
            "documents to hold some out (at least ~40)."
        )
    for k, v in paths.items():
        tf.io.gfile.rename(v + ".tmp", v, overwrite=True)
    return {"train_file": paths["train"], "eval_file": paths["eval"], **counts}


def corpus_stage(settings: DemoSettings, console: Console) -> Tuple[str, str]:
    """Stage 1: writes (or finds) the corpus; returns (train.txt, eval.txt)."""
    import tensorflow as tf

    from pipelines.stdlib_corpus import write_stdlib_corpus

    console.stage(1, "corpus", "documents to learn from, some held out for evaluation")
    corpus_dir = os.path.join(settings.output_dir, "corpus")
    train_txt, eval_txt = os.path.join(corpus_dir, "train.txt"), os.path.join(corpus_dir, "eval.txt")
    if tf.io.gfile.exists(train_txt) and tf.io.gfile.exists(eval_txt):
        console.say("Corpus already in %s.", corpus_dir)
        return train_txt, eval_txt
    if settings.input_file:
        counts = split_user_corpus(settings.input_file, corpus_dir, settings.random_seed)
        source = settings.input_file
    else:
        counts = write_stdlib_corpus(corpus_dir, seed=settings.random_seed)
        source = "the installed Python standard library's docstrings"
    documents = counts["train_documents"] + counts["eval_documents"]
    console.say("%s documents from %s, %s of them held out (%s).", f"{documents:,}", source,
                f"{counts['eval_documents']:,}", corpus_dir)
    return train_txt, eval_txt
