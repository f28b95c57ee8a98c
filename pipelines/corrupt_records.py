"""`--skip_corrupt_records` while reading: each skip named, with its file, at the default verbosity.

tf.data's `ignore_errors(log_warning=True)` logs from TensorFlow's C++ side,
which the binaries silence (TF_CPP_MIN_LOG_LEVEL=3), and without the file. So
each file's records are counted as they are read, with the bytes they take in
the file (a TFRecord is 8 bytes of length, 4 of its CRC, the data, 4 of the
data's CRC); when the file's reading ends before its size, a line goes to
stderr naming the file, the records read and the byte where reading stopped.
It is printed by a TensorFlow op (`tf.print`), so it also comes from tf.data
service workers. Gzipped files are not measured (their size is not the
records' bytes).

Example:

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "a.tfrecord")
>>> with tf.io.TFRecordWriter(path) as w:
...     for i in range(3):
...         w.write(b"record %d" % i)
>>> read = reader_logging_skips([path])
>>> [r.numpy() for r in read(tf.constant(path))]
[b'record 0', b'record 1', b'record 2']
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator, Sequence

import tensorflow as tf

_FRAMING_BYTES = 16  # length (8), its CRC (4), the data's CRC (4)
_QUIET = [False]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Datasets built inside (their read functions are traced then) never log a skip: for the pipelines a
    program reads only to probe its input (`albert_tf.training.train_input`), so that each skip is logged
    once, by the pipeline that trains.

    >>> with quiet():
    ...     _QUIET[0]
    True
    """
    previous, _QUIET[0] = _QUIET[0], True
    try:
        yield
    finally:
        _QUIET[0] = previous


def _sizes_table(files: Sequence[str]) -> tf.lookup.StaticHashTable:
    """path -> size in bytes (-1 for gzipped files: not measured)."""
    sizes = [-1 if f.endswith(".gz") else tf.io.gfile.stat(f).length for f in files]
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(list(files), tf.string), tf.constant(sizes, tf.int64)),
        default_value=-1)


def reader_logging_skips(files: Sequence[str]) -> Callable[[tf.Tensor], tf.data.Dataset]:
    """A `path -> records` function for `Dataset.interleave` that skips what cannot be read and says so.

    Args:
        files: every file the function may be given (their sizes are looked up once).

    Returns:
        The function ``(path, log=True) -> records``: the file's records up to
        the first one that cannot be read; when that is before the file's end
        and `log` (a bool tensor: e.g. the first pass over the files only, as
        the same record is skipped again in every pass), a WARNING line on stderr:
        ``--skip_corrupt_records: FILE: the rest of the file from record N
        (byte B of S) skipped: a corrupt or truncated record``.
    """
    sizes = _sizes_table(files)

    def read(path, log=True):
        if _QUIET[0]:  # read when the dataset is built (traced), not when it runs
            log = False
        compression = tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")
        records = tf.data.TFRecordDataset(path, compression_type=compression).ignore_errors()
        end = tf.data.Dataset.from_tensors((tf.constant(True), tf.constant(b"")))
        tagged = records.map(lambda record: (tf.constant(False), record)).concatenate(end)

        def count(state, item):
            done, offset = state
            is_end, record = item
            not_end = tf.cast(tf.logical_not(is_end), tf.int64)
            length = tf.cast(tf.strings.length(record), tf.int64) + _FRAMING_BYTES
            grown = (done + not_end, offset + not_end * length)
            return grown, (is_end, record, done, offset)

        def keep(is_end, record, done, offset):
            size = sizes.lookup(path)

            def report():
                line = tf.strings.join([
                    "WARNING --skip_corrupt_records: ", path, ": the rest of the file from record ",
                    tf.strings.as_string(done), " (byte ", tf.strings.as_string(offset), " of ",
                    tf.strings.as_string(size), ") skipped in every pass over the data: a corrupt or truncated "
                    "record ends a file's reading."])
                tf.print(line, output_stream=sys.stderr)
                return tf.constant(False)

            cut = tf.logical_and(tf.logical_and(is_end, log), tf.logical_and(size >= 0, offset < size))
            return tf.cond(cut, report, lambda: tf.logical_not(is_end))

        return (tagged.scan((tf.constant(0, tf.int64), tf.constant(0, tf.int64)), count)
                .filter(keep).map(lambda is_end, record, done, offset: record))

    return read
