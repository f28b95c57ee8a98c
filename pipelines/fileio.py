"""File writes that never leave a half-written file behind.

Every file the project writes for others to read (configs, results, shards,
manifests, copied vocabularies) goes through `atomic_write`: the content is
written to a temporary name beside the target and renamed over it when
complete, so an interrupted process leaves either the old file or the new one.

Example:

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "result.txt")
>>> with atomic_write(path) as f:
...     _ = f.write("accuracy = 0.9\\n")
>>> open(path).read()
'accuracy = 0.9\\n'
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, IO

import tensorflow as tf


def temporary_path(path: str) -> str:
    """The temporary name `atomic_write` uses for `path` (unique per process)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w") -> Iterator[IO]:
    """Opens a temporary file for writing and renames it to `path` on success.

    Works on local paths and on every filesystem `tf.io.gfile` knows (gs://,
    hdfs://). On an exception the temporary file is removed and `path` is left
    as it was.

    Args:
        path: the final file name.
        mode: "w" (text, UTF-8) or "wb".

    Yields:
        A writable file object.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}.")
    tmp = temporary_path(path)
    try:
        with tf.io.gfile.GFile(tmp, mode) as f:
            yield f
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)
        raise


def atomic_copy(src: str, dst: str) -> None:
    """Copies `src` to `dst` atomically (nothing to do when they are one file)."""
    if os.path.abspath(src) == os.path.abspath(dst):
        return
    with tf.io.gfile.GFile(src, "rb") as f:
        data = f.read()
    with atomic_write(dst, "wb") as f:
        f.write(data)
