"""The external shuffle's spill files: each instance is appended to one of K
spill files of its shard (`spill_bucket`, a keyed hash of the instance), then
each spill file is shuffled with a seeded, bounded buffer (`shuffled_spill`) and
appended to the shard.

Spill files hold length-prefixed records (`FramedWriter`, `read_framed`; the
graph frames a whole batch at once, `spill_chunks`). At most
`max_open_writers()` files are open for writing: with more spill files,
`SpillRouter` writes through staging files and splits them afterwards, so the
spill files are byte-identical to writing them directly.

Example:

>>> spill_buckets(1), spill_buckets(64), spill_buckets(1000)
(16, 4, 1)
"""

import math
import struct
from typing import Iterator, List, Optional, Sequence

import tensorflow as tf

from pipelines import random_ops

# The most files one worker keeps open for writing (lowered to fit `ulimit -n`).
MAX_OPEN_WRITERS = 256


def max_open_writers() -> int:
    """Files one worker may keep open for writing: MAX_OPEN_WRITERS, or fewer
    when the process's open-file limit (`ulimit -n`) would not leave room for
    the interpreter, TensorFlow and the input files."""
    try:
        import resource  # Unix only.

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return MAX_OPEN_WRITERS
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_WRITERS
    return max(2, min(MAX_OPEN_WRITERS, (soft - 32) // 2))


_TAG = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")


class FramedWriter:
    """Appends length-prefixed records to a temporary file of this run (spill
    and staging files are read back only by `read_framed`, so they need no
    TFRecord framing, and plain reads avoid a tf.data iterator per file)."""

    def __init__(self, path: str):
        self._file = tf.io.gfile.GFile(path, "wb")
        self._file.write(b"")  # GFile opens lazily: create (and hold) the file now

    def write(self, record: bytes) -> None:
        self._file.write(_LENGTH.pack(len(record)) + record)

    def write_framed(self, framed: bytes) -> None:
        """Appends records already framed as `write` frames them."""
        self._file.write(framed)

    def close(self) -> None:
        self._file.close()


def _split_framed(framed: bytes) -> Iterator[bytes]:
    """The records of a string of framed records (`FramedWriter` framing)."""
    offset = 0
    while offset < len(framed):
        (length,) = _LENGTH.unpack_from(framed, offset)
        offset += _LENGTH.size
        yield framed[offset:offset + length]
        offset += length


def read_framed(path: str, block_bytes: int = 4 << 20) -> Iterator[bytes]:
    """The records `FramedWriter` wrote to `path`, in order (read in blocks:
    two file reads per record would cost more than the records)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        pending = b""
        while True:
            data = f.read(block_bytes)
            if not data:
                if pending:
                    raise ValueError(f"Truncated spill file {path!r}: {len(pending)} "
                                     "trailing bytes are not a whole record.")
                return
            pending += data
            offset = 0
            while offset + _LENGTH.size <= len(pending):
                (length,) = _LENGTH.unpack_from(pending, offset)
                end = offset + _LENGTH.size + length
                if end > len(pending):
                    break
                yield pending[offset + _LENGTH.size:end]
                offset = end
            pending = pending[offset:]


class SpillRouter:
    """Appends records to numbered spill files with at most `max_open` files
    open.

    With more files than that, records (tagged with their file number) go to
    one staging file per contiguous range of file numbers, and `finish` splits
    every staging file the same way until the ranges are small enough: each
    spill file receives its records in the order they were written.

    Args:
        paths: the spill files; record i of `write(i, ...)` goes to paths[i].
        staging_prefix: path prefix of the staging files.
        max_open: the most files open for writing at a time (>= 2).
        low, high: the range of file numbers this router handles.
    """

    def __init__(self, paths: Sequence[str], staging_prefix: str, max_open: int,
                 low: int = 0, high: Optional[int] = None):
        self._paths = paths
        self._prefix = staging_prefix
        self._max_open = max_open
        self._low = low
        high = len(paths) if high is None else high
        self._direct = high - low <= max_open
        if self._direct:
            self._ranges = [(i, i + 1) for i in range(low, high)]
            targets = paths[low:high]
        else:
            self._width = math.ceil((high - low) / max_open)
            self._ranges = [(a, min(a + self._width, high))
                            for a in range(low, high, self._width)]
            targets = [f"{staging_prefix}-{a:06d}-{b:06d}" for a, b in self._ranges]
        self._targets = targets
        self._writers: List[FramedWriter] = []
        try:
            for path in targets:
                self._writers.append(FramedWriter(path))
        except BaseException:
            self.close()
            raise

    def write(self, index: int, record: bytes) -> None:
        if self._direct:
            self._writers[index - self._low].write(record)
        else:
            self._writers[(index - self._low) // self._width].write(_TAG.pack(index) + record)

    def write_framed(self, index: int, framed: bytes) -> None:
        """Appends records already framed (`FramedWriter` framing) to file `index`."""
        if self._direct:
            self._writers[index - self._low].write_framed(framed)
        else:
            for record in _split_framed(framed):
                self.write(index, record)

    def close(self, quiet: bool = False) -> None:
        """Closes every file; `quiet`: ignore errors (another one is on its way up)."""
        writers, self._writers = self._writers, []
        for writer in writers:
            try:
                writer.close()
            except (OSError, tf.errors.OpError):
                if not quiet:
                    raise

    def finish(self) -> None:
        """Closes the files and splits the staging files into the spill files."""
        self.close()
        if self._direct:
            return
        for (low, high), staging in zip(self._ranges, self._targets):
            child = SpillRouter(self._paths, staging, self._max_open, low, high)
            try:
                for tagged in read_framed(staging):
                    child.write(_TAG.unpack_from(tagged)[0], tagged[_TAG.size:])
                child.finish()
            finally:
                child.close()
            tf.io.gfile.remove(staging)


def shuffled_spill(records: Iterator[bytes], seed: int, shuffle_buffer_size: int) -> Iterator[bytes]:
    """The records of one spill file (in spill order) as its shard holds them:
    each buffer-sized chunk permuted with the stateless key (seed, chunk).

    Eager, not a tf.data pipeline per shard: with thousands of small shards
    its set-up would dominate.  Unlike Dataset.shuffle(seed=...), a stateless
    permutation does not depend on the global TF seed (tf.random.set_seed).
    Also used by the Beam pipeline (pipelines/beam_pipeline.py).
    """
    for index, chunk in enumerate(_chunks(records, shuffle_buffer_size)):
        key = tf.constant([seed, index], tf.int64)
        shuffled = tf.random.experimental.stateless_shuffle(tf.constant(chunk, tf.string), seed=key)
        for start in range(0, int(shuffled.shape[0]), 1024):
            yield from shuffled[start:start + 1024].numpy()


def _chunks(records: Iterator[bytes], size: int) -> Iterator[List[bytes]]:
    chunk: List[bytes] = []
    for record in records:
        chunk.append(record)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def spill_buckets(num_shards: int) -> int:
    """Spill files per shard: a function of num_shards only (determinism);
    about 256 spill files in all when there are fewer than 256 shards."""
    return max(1, min(16, 256 // num_shards))


def spill_bucket(shuffle_key: tf.Tensor, buckets: int) -> tf.Tensor:
    """Which spill file of its shard an instance goes to: a keyed hash of the
    instance (its `shuffle_key`), not of its position."""
    return tf.cast(tf.bitwise.right_shift(
        random_ops.fold_in(shuffle_key, random_ops.SHUFFLE),
        tf.constant(33, tf.uint64)), tf.int64) % buckets


def shard_seed(seed: int, shard: int) -> int:
    key = random_ops.fold_in(random_ops.fold_in(random_ops.seed_key(seed),
                                                random_ops.SHUFFLE), shard)
    return int(tf.bitwise.right_shift(key, tf.constant(2, tf.uint64)).numpy())


_BYTE_STRINGS = [bytes([value]) for value in range(256)]


def spill_chunks(serialized: tf.Tensor, spill: tf.Tensor, num_spills: int):
    """Frames records as `FramedWriter.write` does (8-byte little-endian
    length, then the bytes) and joins them per spill file, in batch order.

    Args:
        serialized: string [C] records.
        spill: int64 [C] spill file number of each record.
        num_spills: number of spill files.

    Returns:
        (chunks, sizes): string [num_spills] the framed records of each file,
        int32 [num_spills] how many records each holds.
    """
    length = tf.cast(tf.strings.length(serialized), tf.int64)
    shifts = tf.range(0, 64, 8, dtype=tf.int64)
    byte_values = tf.bitwise.bitwise_and(tf.bitwise.right_shift(length[:, None], shifts[None, :]),
                                         tf.constant(255, tf.int64))
    header = tf.strings.reduce_join(tf.gather(tf.constant(_BYTE_STRINGS), byte_values), axis=1)
    framed = tf.strings.join([header, serialized])
    chunks = tf.strings.unsorted_segment_join(framed, spill, num_spills)
    sizes = tf.math.unsorted_segment_sum(tf.ones_like(spill, tf.int32), spill, num_spills)
    return chunks, sizes
