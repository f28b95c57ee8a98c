"""TF Serving's version folders: the next free number, and never overwriting one.

Two exports into one folder at once must not choose the same number. An
export that chooses its number (version None) on a local folder reserves it
first: `os.mkdir` of ``export_dir/.reserved-N`` is atomic, so of two exports
racing for N one gets N and the other moves on to N+1. The reservation is
removed once the version folder is in place (`release_version`); a process
killed while exporting leaves its reservation, and that number is skipped
(TF Serving does not mind gaps). Remote folders (gs://) have no atomic mkdir
through tf.io.gfile: there the number is the next free one and the final
rename refuses an existing folder (the export fails rather than overwrite).

Publishing a version (`publish`): a local folder is renamed into place (one
atomic step). An object store (gs://, s3://) renames a folder object by
object, so TF Serving, which polls the base folder, could see `N/` with
`saved_model.pb` and without its variables: there the files are moved one by
one with the file that makes the folder loadable (`saved_model.pb`) last, so a
half-published version never loads. Two exports of one version into one
remote folder at once are still not excluded (no atomic create on object
stores through tf.io.gfile): run them one after the other.
"""

from __future__ import annotations

import os
import uuid
from typing import List, Optional, Set, Tuple

import numpy as np
import tensorflow as tf

RESERVATION_PREFIX = ".reserved-"
_RESERVED: Set[Tuple[str, int]] = set()  # (export_dir, version) reserved by this process


def _taken(export_dir: str) -> Set[int]:
    numbers = set()
    for name in tf.io.gfile.listdir(export_dir):
        name = name.rstrip("/")
        if name.startswith(RESERVATION_PREFIX):
            name = name[len(RESERVATION_PREFIX):]
        if name.isdigit():
            numbers.add(int(name))
    return numbers


def next_version(export_dir: str) -> int:
    """One more than the largest numeric (or reserved) subfolder of export_dir (1 when none).

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> os.mkdir(os.path.join(folder, "3"))
    >>> next_version(folder)
    4
    """
    if not tf.io.gfile.isdir(export_dir):
        return 1
    return max(_taken(export_dir), default=0) + 1


def reserve_version(export_dir: str, attempts: int = 1000) -> int:
    """The next free version, reserved for this process (local folders; see the module docstring).

    Args:
        export_dir: the folder of version folders (created when missing).
        attempts: how many numbers to try before giving up.

    Returns:
        The version number; `release_version` frees its reservation.

    Example (two exports choosing at once get two numbers):

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> reserve_version(folder), reserve_version(folder)
    (1, 2)
    """
    if "://" in export_dir and not export_dir.startswith("file://"):
        return next_version(export_dir)
    # Local semantics on purpose: os.mkdir is atomic, so it is the reservation.
    # A file:// URL is a local folder under its path (os.mkdir does not read URLs).
    local_dir = export_dir[len("file://"):] if export_dir.startswith("file://") else export_dir
    os.makedirs(local_dir, exist_ok=True)
    version = next_version(export_dir)
    for _ in range(attempts):
        try:
            os.mkdir(os.path.join(local_dir, f"{RESERVATION_PREFIX}{version}"))
        except FileExistsError:
            version += 1
            continue
        if os.path.exists(os.path.join(local_dir, str(version))):  # made by a tool that does not reserve
            release_version(export_dir, version, force=True)
            version += 1
            continue
        _RESERVED.add((export_dir, version))
        return version
    raise FileExistsError(f"No free export version in {export_dir!r} after {attempts} attempts.")


def release_version(export_dir: str, version: Optional[int], force: bool = False) -> None:
    """Removes this process's reservation of `version` (nothing when there is none)."""
    if version is None or (not force and (export_dir, version) not in _RESERVED):
        return
    _RESERVED.discard((export_dir, version))
    local_dir = export_dir[len("file://"):] if export_dir.startswith("file://") else export_dir
    try:
        os.rmdir(os.path.join(local_dir, f"{RESERVATION_PREFIX}{version}"))
    except FileNotFoundError:
        pass


def _choose_version(export_dir: str, version: Optional[int]) -> int:
    """The version to export as: `version` if free, else (None) a reserved next one."""
    if version is None:
        return reserve_version(export_dir)
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version!r}.")
    path = os.path.join(export_dir, str(int(version)))
    if tf.io.gfile.exists(path):
        raise FileExistsError(
            f"Export version {path!r} exists already; it is never overwritten. Choose another version "
            f"(next free: {next_version(export_dir)}) or leave it unset."
        )
    return int(version)


def staging_name(final_dir: str) -> str:
    """A hidden folder beside `final_dir` that TF Serving ignores (not a number), unique to this call (a
    uuid: two hosts' processes may share a pid).

    >>> staging_name("exports/sst2/3").startswith("exports/sst2/.tmp-3-")
    True
    """
    parent, name = os.path.split(final_dir.rstrip("/"))
    return os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex[:12]}")


def _files_under(folder: str) -> List[str]:
    """Relative names of the files under a local or remote folder."""
    names = []
    for root, _, files in tf.io.gfile.walk(folder):
        rel = root[len(folder.rstrip("/")):].lstrip("/")
        names.extend(os.path.join(rel, name) if rel else name for name in files)
    # ram:// lists keys by prefix: "assets" also yields ".extra" of "assets.extra"; keep real files.
    return [name for name in names if tf.io.gfile.exists(os.path.join(folder, name))
            and not tf.io.gfile.isdir(os.path.join(folder, name))]


def publish(staging: str, final_dir: str, last: str) -> None:
    """Moves the complete folder `staging` to `final_dir`, never overwriting it.

    Local: one rename. Remote: file by file, `last` (the file that makes the
    folder usable) at the end; see the module docstring.

    Args:
        staging: the complete folder (the same file system as final_dir).
        final_dir: where it goes; must not exist.
        last: the relative name of the file written last.

    Raises:
        FileExistsError: final_dir exists.
    """
    if tf.io.gfile.exists(final_dir):
        raise FileExistsError(f"Export version {final_dir!r} appeared while exporting; not overwritten.")
    if "://" not in final_dir or final_dir.startswith("file://"):
        tf.io.gfile.rename(staging, final_dir, overwrite=False)
        return
    for name in sorted(_files_under(staging), key=lambda name: (name == last, name)):
        tf.io.gfile.makedirs(os.path.dirname(os.path.join(final_dir, name)))
        tf.io.gfile.rename(os.path.join(staging, name), os.path.join(final_dir, name), overwrite=False)


def remove_staging(staging: str) -> None:
    """Removes what is left of a staging folder (nothing when it is gone: object stores keep no empty
    folders, and ram:// says that a prefix exists that rmtree cannot find)."""
    try:
        if tf.io.gfile.exists(staging):
            tf.io.gfile.rmtree(staging)
    except tf.errors.NotFoundError:
        pass
