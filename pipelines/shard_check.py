"""Checks TFRecord shards against their manifest, and finds a corrupt record.

`check_shards` runs before the first training step (albert-pretrain
--verify_shards): every input file named PREFIX-NNNNN-of-MMMMM.tfrecord[.gz]
beside a PREFIX.manifest.json with shard entries (pipelines/shard_manifest.py)
is checked against its entry:

* "size": its size (one stat per file) and, from the manifest's settings
  (num_shards, file_prefix, output_compression), that no shard of the set is
  missing from the folder; record counts come from the manifest, unread;
* "full": also the SHA-256 of every file's bytes (one read of the data);
* "none": nothing.

Files without a manifest (written by the original tool, or by hand) are still
read: they are counted as unverified and logged in one line.

`locate_corrupt_record` turns tf.data's "corrupted record at 1989" (which
names no file) into the file, the record's index and its byte offset: it walks
the record headers of the candidate files (12 bytes read per record, the data
skipped) to the offset and checks the record found there (its length, the
CRCs of length and data: TFRecord's masked CRC-32C).

Example:

>>> report = check_shards(["data/pretrain-00000-of-00002.tfrecord"], "size")  # doctest: +SKIP
>>> report.records                                                            # doctest: +SKIP
4096
"""

from __future__ import annotations

import dataclasses
import os
import re
import struct
from typing import Dict, List, Optional, Sequence, Tuple

from pipelines import shard_manifest

MODES = ("none", "size", "full")
_SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5,})-of-(?P<count>\d{5,})\.tfrecord(?P<gz>\.gz)?$")
_TF_ERROR = re.compile(r"(corrupted|truncated) record at (\d+)")


class ShardCheckError(ValueError):
    """Shards that do not match their manifest (the message names each one)."""


@dataclasses.dataclass
class ShardReport:
    """What `check_shards` found.

    Attributes:
        verified: files that matched their manifest entry.
        unverified: files without a manifest or without an entry in it.
        problems: one "name (what is wrong)" per bad or missing shard.
        records: records of the verified files, from the manifest.
        checked: files checked against a manifest, the missing ones included.
        manifests: the manifests used.
        bad: path -> the manifest's record count, for each bad shard present.
        unchecked: (manifest path, what is wrong with it, shards it leaves
            unchecked) for each set of named shards whose manifest is missing,
            cut or without entries (those shards are in `unverified` too).
    """

    verified: List[str] = dataclasses.field(default_factory=list)
    unverified: List[str] = dataclasses.field(default_factory=list)
    problems: List[str] = dataclasses.field(default_factory=list)
    records: int = 0
    checked: int = 0
    manifests: List[str] = dataclasses.field(default_factory=list)
    bad: Dict[str, int] = dataclasses.field(default_factory=dict)
    unchecked: List[Tuple[str, str, List[str]]] = dataclasses.field(default_factory=list)

    def problem_line(self) -> str:
        """One line naming every problem, e.g. "2 of 8 shards do not match ..."."""
        where = f" ({', '.join(self.manifests)})" if self.manifests else ""
        return (f"{len(self.problems)} of {self.checked} shards do not match their manifest{where}: "
                + ", ".join(self.problems))


def _expected_names(manifest: Dict[str, object], prefix: str) -> List[str]:
    """Every shard name of the set the manifest's settings describe (or its entries)."""
    settings = manifest.get("settings") or {}
    count = settings.get("num_shards")
    if isinstance(count, int) and count > 0 and settings.get("file_prefix", prefix) == prefix:
        suffix = ".tfrecord.gz" if settings.get("output_compression") == "GZIP" else ".tfrecord"
        return [f"{prefix}-{i:05d}-of-{count:05d}{suffix}" for i in range(count)]
    return sorted(manifest.get(shard_manifest.SHARDS_KEY) or {})


def _file_size(path: str) -> Optional[int]:
    import tensorflow as tf

    try:
        return int(tf.io.gfile.stat(path).length)
    except tf.errors.NotFoundError:
        return None


def _check_one(path: str, entry: Dict[str, object], mode: str) -> Optional[str]:
    """None when the file matches its entry, else "(what differs)"."""
    size = _file_size(path)
    if size is None:
        return "(missing)"
    if size != entry.get("bytes"):
        return f"(size {size}, manifest {entry.get('bytes')})"
    if mode == "full":
        digest = shard_manifest.sha256_of(path)
        if digest != entry.get(shard_manifest.CHECKSUM):
            return (f"(sha256 {digest[:12]}, manifest {str(entry.get(shard_manifest.CHECKSUM))[:12]}: "
                    "same size, other bytes)")
    return None


def _manifest_fault(folder: str, prefix: str, manifest: Optional[Dict[str, object]], paths: List[str]):
    """(manifest path, what is wrong with it, paths) for a set of named shards that it cannot check."""
    import tensorflow as tf

    path = shard_manifest.manifest_path(folder, prefix)
    if manifest is not None:
        return path, "without shard entries (an older version's)", paths
    return path, ("missing" if not tf.io.gfile.exists(path) else "unreadable (cut, or not a JSON object)"), paths


def manifest_groups(files: Sequence[str]) -> Tuple[Dict[Tuple[str, str], List[str]], List[str]]:
    """The files grouped by the manifest that describes them: ({(folder, prefix): shard paths}, files whose
    names are not shard names, so that no manifest describes them).

    Args:
        files: input files (expanded, no globs).

    Example:
    >>> manifest_groups(["d/p-00000-of-00002.tfrecord", "d/p-00001-of-00002.tfrecord", "d/x.tfrecord"])
    ({('d', 'p'): ['d/p-00000-of-00002.tfrecord', 'd/p-00001-of-00002.tfrecord']}, ['d/x.tfrecord'])
    """
    groups: Dict[Tuple[str, str], List[str]] = {}
    others: List[str] = []
    for path in files:
        match = _SHARD_NAME.match(os.path.basename(path))
        if match is None:
            others.append(path)
        else:
            groups.setdefault((os.path.dirname(path), match.group("prefix")), []).append(path)
    return groups, others


def check_shards(files: Sequence[str], mode: str = "size") -> ShardReport:
    """Checks `files` against the manifests beside them.

    Args:
        files: the input files (expanded, no globs).
        mode: "none", "size" or "full" (see the module docstring).

    Returns:
        A ShardReport; `problems` is empty when everything matched.
    """
    if mode not in MODES:
        raise ValueError(f"verify_shards must be one of {MODES}, got {mode!r}.")
    report = ShardReport()
    # A broad glob also matches the manifest and hidden temporary files (the reader skips them).
    files = [f for f in files if not os.path.basename(f).startswith(".")
             and not f.endswith(shard_manifest.tfrecords.MANIFEST_SUFFIX)]
    if mode == "none":
        report.unverified = list(files)
        return report
    groups, others = manifest_groups(files)
    report.unverified.extend(others)
    for (folder, prefix), paths in sorted(groups.items()):
        manifest = shard_manifest.read_manifest(folder, prefix)
        entries = (manifest or {}).get(shard_manifest.SHARDS_KEY) or {}
        if not entries:
            report.unverified.extend(paths)
            report.unchecked.append(_manifest_fault(folder, prefix, manifest, paths))
            continue
        report.manifests.append(shard_manifest.manifest_path(folder, prefix))
        given = {os.path.basename(p): p for p in paths}
        for name in _expected_names(manifest, prefix):
            if name not in given and _file_size(os.path.join(folder, name)) is None:
                report.checked += 1
                report.problems.append(f"{name} (missing)")
        for name, path in sorted(given.items()):
            entry = entries.get(name)
            if entry is None:
                report.unverified.append(path)
                continue
            report.checked += 1
            problem = _check_one(path, entry, mode)
            if problem:
                report.problems.append(f"{name} {problem}")
                if problem != "(missing)":
                    report.bad[path] = int(entry.get("records") or 0)
            else:
                report.verified.append(path)
                report.records += int(entry.get("records") or 0)
    report.problems.sort()  # each starts with its shard's name
    return report


# --------------------------------------------------------------------------- corrupt records


def _crc32c_table() -> List[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of `data`, pure Python (used on one record at a time).

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _open(path: str):
    """A binary stream of the file (decompressed for .gz); short reads at its end."""
    from pipelines import fileio  # imports TensorFlow: only when a file is read

    return fileio.open_binary(path)


def _record_at(path: str, offset: int) -> Optional[str]:
    """If `path` has a record starting at byte `offset` (of its uncompressed
    stream) that is truncated or fails a CRC: "record K at byte N (why)"."""
    with _open(path) as f:
        position, index = 0, 0
        while position < offset:
            header = f.read(12)
            if len(header) < 12:
                return None
            length, length_crc = struct.unpack("<QI", header)
            if masked_crc32c(header[:8]) != length_crc:
                return None  # the file is broken earlier: it is not this offset's file
            f.seek(position + 12 + length + 4)
            position += 12 + length + 4
            index += 1
        if position != offset:
            return None
        header = f.read(12)
        where = f"record {index} at byte {offset}"
        if len(header) < 12:
            return f"{where} (truncated: the file ends inside its header)" if header else None
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != length_crc:
            return f"{where} (its length fails its CRC)"
        data = f.read(length)
        footer = f.read(4)
        if len(data) < length or len(footer) < 4:
            return f"{where} (truncated: {len(data)} of {length} bytes)"
        if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
            return f"{where} (its data fails its CRC)"
    return None


def locate_corrupt_record(message: str, files: Sequence[str]) -> Optional[str]:
    """The file(s) and record behind tf.data's DataLossError `message`.

    Args:
        message: the error's text ("corrupted record at N" / "truncated record at N").
        files: the input files the dataset read.

    Returns:
        "NAME: record K at byte N (why)" (several files joined with "; "), or
        None when the message has no offset or no file has such a record.
    """
    match = _TF_ERROR.search(message)
    if not match:
        return None
    offset = int(match.group(2))
    # TensorFlow gives the record's offset for a bad length, that of its data
    # (12 bytes on) for bad data.
    starts = [offset, offset - 12] if offset >= 12 else [offset]
    found = []
    for path in files:
        size = _file_size(path)
        if size is None or (size <= offset - 12 and not path.endswith(".gz")):
            continue
        for start in starts:
            try:
                where = _record_at(path, start)
            except Exception:  # noqa: BLE001  (an unreadable file is not the one: go on)
                where = None
            if where:
                found.append(f"{path}: {where}")
                break
    return "; ".join(found) or None


def verify_input_shards(files: Sequence[str], mode: str = "size",
                        skip_corrupt_records: bool = False) -> ShardReport:
    """`check_shards`, logged the way albert-pretrain reports it.

    Args:
        files: the input files.
        mode: "none", "size" or "full".
        skip_corrupt_records: report problems as a warning and go on (the
            reader then skips what it cannot read) instead of raising.

    Returns:
        The ShardReport.

    Raises:
        ShardCheckError: a bad or missing shard (one line naming each),
            unless `skip_corrupt_records`.
    """
    from absl import logging

    report = check_shards(files, mode)
    if mode == "none":
        return report
    if report.problems:
        if not skip_corrupt_records:
            raise ShardCheckError(
                report.problem_line() + ". Delete the bad shards and rerun albert-create-pretraining-data "
                "with the same flags (it writes only missing shards), or pass --skip_corrupt_records.")
        logging.warning("%s; reading them anyway (--skip_corrupt_records).", report.problem_line())
    if skip_corrupt_records:
        _log_skipped(report)
    if report.verified:
        logging.info("%d shard(s) match their manifest (%s: %s): %d records.", len(report.verified),
                     mode, "size" if mode == "size" else "size and SHA-256", report.records)
    for path, fault, paths in report.unchecked:
        logging.warning("Shard manifest %s is %s: the %s of its %d shard(s) is not checked, so a truncated, grown "
                        "or missing shard is read as it is.", path, fault,
                        "size" if mode == "size" else "size and SHA-256", len(paths))
    named = {p for _, _, paths in report.unchecked for p in paths}
    plain = [p for p in report.unverified if p not in named]
    if plain:
        logging.info("%d input file(s) have no manifest entry and are read unverified (e.g. %s).",
                     len(plain), os.path.basename(plain[0]))
    return report


def readable_records(path: str) -> int:
    """Records of a TFRecord file before the first truncated one or bad length
    (a header walk: the data is skipped, its CRC unchecked)."""
    import tensorflow as tf

    count, position = 0, 0
    with _open(path) as f:
        while True:
            try:
                header = f.read(12)
                if len(header) < 12:
                    return count
                length, length_crc = struct.unpack("<QI", header)
                if masked_crc32c(header[:8]) != length_crc:
                    return count
                f.seek(position + 12 + length)
                if len(f.read(4)) < 4:
                    return count
            except (tf.errors.OutOfRangeError, EOFError, OSError):  # GFile at a remote file's end
                return count
            position += 12 + length + 4
            count += 1


def _log_skipped(report: ShardReport) -> None:
    """The --skip_corrupt_records lines: what it does, and the records lost in
    the shards the manifest check found bad (counted by a header walk)."""
    from absl import logging

    logging.warning("--skip_corrupt_records: a corrupt or truncated record ends its file's reading "
                    "(tf.data cannot resync inside a TFRecord file); each such end is logged with its file, "
                    "record and byte as it is read.")
    lost = 0
    for path, expected in sorted(report.bad.items()):
        readable = readable_records(path)
        lost += max(expected - readable, 0)
        logging.warning("--skip_corrupt_records: %s: %d of its %d records readable, %d skipped.",
                        os.path.basename(path), readable, expected, max(expected - readable, 0))
    if report.bad:
        logging.warning("--skip_corrupt_records: %d record(s) of %d bad shard(s) skipped in each epoch.",
                        lost, len(report.bad))
