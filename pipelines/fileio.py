"""File access for user paths, local or remote, and writes that never leave a
half-written file behind.

Every user path (a config, checkpoint folder, run state, result file) may be a
URL of any file system TensorFlow knows (gs://, s3://, hdfs://, ram://), so the
library reads and tests it through `tf.io.gfile`, never `open()` or `os.path`:
`read_text`, `read_bytes`, `read_json`, `open_binary`, `makedirs` and `absolute`
below.
tests/albert_tf/test_remote_paths.py scans the code for the local-only calls.

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
import errno
import gzip
import io
import json
import os
import uuid
from typing import Any, Iterator, IO

import tensorflow as tf


def is_url(path: str) -> bool:
    """Whether `path` names a file system by scheme (gs://bucket/x), not a local file."""
    return "://" in path


def absolute(path: str) -> str:
    """`path` made absolute when local; a URL is kept as given (os.path.abspath
    would turn gs://bucket into CWD/gs:/bucket)."""
    return path if is_url(path) else os.path.abspath(path)


def read_bytes(path: str) -> bytes:
    """The bytes of a local or remote file.

    Raises:
        FileNotFoundError: when there is no such file (as `open()` raises, so
            callers need not know TensorFlow's NotFoundError).
    """
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    except tf.errors.NotFoundError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None


class _ShortReadFile(io.RawIOBase):
    """A GFile that reads like a local file at its end: a seek past the end is
    allowed and the reads after it are short (GFile raises OutOfRangeError)."""

    def __init__(self, path: str):
        super().__init__()
        self._file = tf.io.gfile.GFile(path, "rb")
        self._file.size()  # GFile opens lazily: a missing file raises NotFoundError here, not at the first read
        self._past_end = None  # the position of a seek beyond the end

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._past_end is not None:
            return 0
        data = self._file.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.tell()
        elif whence == io.SEEK_END:
            offset += self._file.size()
        try:
            self._file.seek(offset)
            self._past_end = None
        except tf.errors.OutOfRangeError:
            self._past_end = offset
        return offset

    def tell(self) -> int:
        return self._past_end if self._past_end is not None else self._file.tell()

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


def open_binary(path: str) -> IO[bytes]:
    """A binary stream of a local or remote file, decompressed when its name
    ends in `.gz`, with a local file's short reads at the end.

    Raises:
        FileNotFoundError: when there is no such file.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "lines.txt.gz")
    >>> with gzip.open(path, "wb") as f:
    ...     _ = f.write(b"one\\ntwo\\n")
    >>> with open_binary(path) as f:
    ...     list(f)
    [b'one\\n', b'two\\n']
    """
    try:
        raw = _ShortReadFile(path)
    except tf.errors.NotFoundError:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None
    stream = io.BufferedReader(raw)
    return gzip.GzipFile(fileobj=stream, mode="rb") if path.endswith(".gz") else stream


def read_text(path: str) -> str:
    """The UTF-8 text of a local or remote file (FileNotFoundError when missing)."""
    return read_bytes(path).decode("utf-8")


def read_json(path: str) -> Any:
    """A local or remote JSON file; invalid JSON is a ValueError naming the file."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def makedirs(path: str) -> None:
    """Creates a local or remote folder and its parents (nothing when it exists)."""
    tf.io.gfile.makedirs(path)


def temporary_path(path: str) -> str:
    """The temporary name `atomic_write` uses for `path` (unique per call: a uuid, since processes of two
    hosts writing one remote file may share a pid)."""
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:12]}")


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
    if absolute(src) == absolute(dst):
        return
    data = read_bytes(src)
    with atomic_write(dst, "wb") as f:
        f.write(data)
