"""One writer per output folder: a lock for local folders, a lease for remote ones.

`albert-pretrain`, `albert-finetune` and `albert-create-pretraining-data` hold
a `FolderLock` on their output folder while they run, so that a second run on
the same folder (a restarted job whose old copy is still alive) is refused in
one line naming the holder instead of writing checkpoints beside it.

The rule:

* **Local folders** (no scheme, or file://): an exclusive `fcntl.flock` on
  ``<folder>/.albert-lock``, which holds the holder's host, pid, program and
  start time. The kernel releases the lock when the process dies however it
  dies (kill -9 too), so a lock left by a dead process is simply taken over;
  the file's leftover contents name that holder in a log line. A clean exit
  removes the file. flock needs a local filesystem (on NFS it may be
  per-host only).
* **Remote folders** (gs://, s3://, hdfs://, any `tf.io.gfile` scheme): a
  lease file ``<folder>/.albert-lease`` (JSON: host, pid, program, start
  time, heartbeat time, a random token) that a daemon thread rewrites every
  `heartbeat_seconds` (30). A lease whose heartbeat is older than
  `stale_heartbeats` (4) heartbeats, 2 minutes by default, is stale: its
  holder is taken to be dead and the lease is taken over with a log line (so
  is a lease of a dead pid on this same host, at once). After writing its
  lease a writer reads it back a moment later and gives up if another token
  is there (two writers starting in the same second). Hosts' clocks must
  agree to well under the stale time (NTP). Object stores offer no atomic
  create through tf.io.gfile, so the lease is a strong guard, not a proof.

* **A lost lease stops the run**: when the heartbeat finds another writer's
  lease in place of its own, the lock calls `on_lost` (the binaries pass
  `albert_tf.preemption.request_stop`: the training loop finishes its step,
  writes its checkpoint and exits 75 with one line naming the new holder).
* **Who is dead**: a lease of this host whose pid is gone, is this process's
  own pid (a restarted container's new process often gets the old one's pid)
  without being one of its locks, or belongs to a process started after the
  lease was taken (`/proc/<pid>/stat`): taken over at once.
* **A refusal that may clear by itself** (the holder is on another host, or
  cannot be checked, and may have died since its last heartbeat) is
  `LeaseMayBeStale`, exit code 75 in the binaries, and names the time at
  which the lease is free if its holder is gone.
* **Mounts that look local**: a folder on a FUSE or network file system
  (`/proc/mounts`: fuse.*, nfs, cifs, smb*, 9p, lustre, ceph, ...) gets the
  lease, as a remote folder does, with a WARNING line: flock there is per
  host at best (gcsfuse's `/gcs/...` of Vertex AI), or unsupported.

Workers that write to their own files share a folder: `lock_name` gives each
(worker, number of workers) its own lock file.

Example:

>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> with FolderLock(folder, "example"):
...     FolderLock(folder, "second").acquire()
Traceback (most recent call last):
...
pipelines.locking.FolderLocked: ... is in use by example pid ... (lock .../.albert-lock): ...
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from typing import Callable, Dict, Optional, Tuple

from absl import logging

LOCK_FILENAME = ".albert-lock"
LEASE_FILENAME = ".albert-lease"
HEARTBEAT_SECONDS = 30.0
STALE_HEARTBEATS = 4
EXIT_TRY_AGAIN = 75  # EX_TEMPFAIL, as for a preempted run
MOUNTS_FILE = "/proc/mounts"
# File system types (/proc/mounts) on which flock is per host at best, or missing.
NETWORK_FS_PREFIXES = ("fuse", "nfs", "cifs", "smb", "9p", "lustre", "ceph", "glusterfs", "gpfs", "beegfs",
                       "afs", "davfs", "sshfs", "s3fs", "gcsfuse", "virtiofs")
# Leases of this process's live FolderLocks (their tokens): our pid in a lease with another token is a
# previous process's, given our pid again (a restarted container).
_OWN_TOKENS = set()


class FolderLocked(OSError):
    """Another live process holds the folder (the message names it)."""


class LeaseMayBeStale(FolderLocked):
    """A remote lease whose holder cannot be checked from here: it may have died since its last heartbeat.
    The binaries exit with `exit_code` (75, "try again later"); the message says when the lease is free."""

    exit_code = EXIT_TRY_AGAIN


def lock_name(worker_index: int = 0, num_workers: int = 1) -> str:
    """The lock file's name: one per folder, or one per worker of `num_workers`.

    Example:

    >>> lock_name(), lock_name(1, 4)
    ('.albert-lock', '.albert-lock-worker-1-of-4')
    """
    if num_workers <= 1:
        return LOCK_FILENAME
    return f"{LOCK_FILENAME}-worker-{worker_index}-of-{num_workers}"


def is_local(path: str) -> bool:
    """Whether `path` is on the local filesystem (no scheme, or file://)."""
    return "://" not in path or path.startswith("file://")


def describe(record: Dict) -> str:
    """`albert-pretrain pid 12 on host-a since 2026-12-02 17:00:00 UTC` (what a record holds)."""
    return (f"{record.get('program', '?')} pid {record.get('pid', '?')} on {record.get('host', '?')} "
            f"since {record.get('started', '?')}")


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError):
        return True  # someone else's process, or unknown: assume alive
    return True


def _process_start_unix(pid) -> Optional[float]:
    """When process `pid` of this host started (Unix time, about 1 s precise), or None when unknown."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, after "pid (comm)"
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, TypeError, IndexError, StopIteration):
        return None


def holder_is_gone(record: Dict) -> Optional[str]:
    """Why the lease `record` of this host belongs to no running holder, or None when it may.

    Gone: its pid is not running, is this process's own without one of its
    locks' tokens, or started after the lease was taken (a reused pid).
    """
    pid = record.get("pid")
    if record.get("host") != socket.gethostname():
        return None
    if not _pid_alive(pid):
        return "its process is gone"
    if pid == os.getpid() and record.get("token") not in _OWN_TOKENS:
        return f"its pid {pid} is this process's own (a restart given the same pid)"
    started = _process_start_unix(pid)
    taken = record.get("started_unix")
    if started is not None and isinstance(taken, (int, float)) and started > taken + 2.0:
        return f"pid {pid} is another process now (started after the lease was taken)"
    return None


def network_filesystem(path: str) -> Optional[Tuple[str, str]]:
    """(fstype, mount point) of the FUSE or network file system that holds local `path`, else None.

    Reads `MOUNTS_FILE` (/proc/mounts); the longest mount point that contains
    the path decides. None where the file cannot be read (not Linux).
    """
    try:
        with open(MOUNTS_FILE, encoding="utf-8", errors="replace") as f:
            mounts = [line.split()[1:3] for line in f if len(line.split()) >= 3]
    except OSError:
        return None
    path = os.path.realpath(path)
    best = None
    for point, fstype in mounts:
        point = point.replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[1])):
            best = (fstype, point)
    if best and best[0].lower().startswith(NETWORK_FS_PREFIXES):
        return best
    return None


def _parse(text: str) -> Optional[Dict]:
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


class FolderLock:
    """Exclusive use of an output folder while the process runs (see the module docstring).

    Args:
        folder: the output folder (created when missing).
        program: the holder's name in messages (e.g. "albert-pretrain").
        name: the lock (or lease) file's name in the folder, `lock_name()`.
        heartbeat_seconds: remote folders: the lease's refresh interval.
        stale_heartbeats: remote folders: a lease this many heartbeats old is stale.
        on_lost: remote folders: called (from the heartbeat thread) with a
            phrase naming the lease and its new holder when another writer
            took the folder over.
    """

    def __init__(self, folder: str, program: str, name: Optional[str] = None,
                 heartbeat_seconds: Optional[float] = None, stale_heartbeats: Optional[int] = None,
                 on_lost: Optional[Callable[[str], None]] = None):
        heartbeat_seconds = HEARTBEAT_SECONDS if heartbeat_seconds is None else heartbeat_seconds
        stale_heartbeats = STALE_HEARTBEATS if stale_heartbeats is None else stale_heartbeats
        if heartbeat_seconds <= 0 or stale_heartbeats < 1:
            raise ValueError(f"heartbeat_seconds must be > 0 and stale_heartbeats >= 1, got "
                             f"{heartbeat_seconds!r} and {stale_heartbeats!r}.")
        self.folder = folder[len("file://"):] if folder.startswith("file://") else folder
        self.program = program
        self.on_lost = on_lost
        self.local = is_local(folder)
        mount = network_filesystem(self.folder) if self.local else None
        if mount:
            self.local = False
            logging.warning("%s is on a %s file system (mounted at %s): one writer per folder is kept with a "
                            "heartbeat lease, as for gs://, not with flock (per host at best there).",
                            self.folder, mount[0], mount[1])
        default = LOCK_FILENAME if self.local else LEASE_FILENAME
        if name and not self.local:
            name = name.replace(LOCK_FILENAME, LEASE_FILENAME)
        self.path = os.path.join(self.folder, name or default)
        self.heartbeat_seconds = float(heartbeat_seconds)
        self.stale_seconds = self.heartbeat_seconds * stale_heartbeats
        self._fd: Optional[int] = None
        self._record: Optional[Dict] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.lost = False  # remote: another writer replaced our lease

    def _new_record(self) -> Dict:
        now = time.time()
        return {"host": socket.gethostname(), "pid": os.getpid(), "program": self.program,
                "started": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(
                    "%Y-%m-%d %H:%M:%S UTC"),
                "started_unix": now, "heartbeat_unix": now, "token": uuid.uuid4().hex}

    def _refuse(self, holder: Optional[Dict], detail: str = "") -> FolderLocked:
        who = describe(holder) if holder else "another process"
        kind = "lock" if self.local else "lease"
        return FolderLocked(
            f"{self.folder} is in use by {who} ({kind} {self.path}{detail}): one writer per folder. "
            "Wait for it to finish, stop it, or use another output folder.")

    def _refuse_maybe_stale(self, holder: Dict, age: float) -> LeaseMayBeStale:
        free = float(holder.get("heartbeat_unix", 0)) + self.stale_seconds
        when = datetime.datetime.fromtimestamp(free, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return LeaseMayBeStale(
            f"{self.folder} is in use by {describe(holder)} (lease {self.path}, heartbeat {age:.0f} s ago; "
            f"stale after {self.stale_seconds:.0f} s): one writer per folder. If that run is gone, the lease "
            f"is free at {when} (in {max(0.0, free - time.time()):.0f} s): run the same command again then "
            f"(exit code {EXIT_TRY_AGAIN}); else stop it, or use another output folder.")

    # ----------------------------------------------------------- local
    def _open_locked(self) -> int:
        """A descriptor of the lock file at `path`, flock-ed; FolderLocked when held."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _parse(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace"))
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise self._refuse(holder) from None
                raise
            try:  # the holder we waited for may have removed the file: lock the one at `path`
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def _acquire_local(self) -> None:
        os.makedirs(self.folder, exist_ok=True)
        fd = self._open_locked()
        previous = _parse(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace"))
        if previous:
            logging.warning("Took over the lock %s of %s, which is no longer running (it ended without "
                            "releasing it).", self.path, describe(previous))
        self._record = self._new_record()
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self._record, sort_keys=True).encode(), 0)
        os.fsync(fd)
        self._fd = fd

    def _release_local(self) -> None:
        fd, self._fd = self._fd, None
        os.remove(self.path)  # a clean end: no file, nothing to report to the next holder
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    # ----------------------------------------------------------- remote
    def _read_lease(self) -> Optional[Dict]:
        import tensorflow as tf

        try:
            with tf.io.gfile.GFile(self.path, "r") as f:
                return _parse(f.read())
        except tf.errors.NotFoundError:
            return None

    def _write_lease(self) -> None:
        import tensorflow as tf

        # Written beside and renamed over: a reader never sees half a lease.
        tmp = f"{self.path}.tmp-{self._record['token'][:12]}"
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(json.dumps(self._record, sort_keys=True))
        tf.io.gfile.rename(tmp, self.path, overwrite=True)

    def _acquire_remote(self) -> None:
        import tensorflow as tf

        tf.io.gfile.makedirs(self.folder)
        holder = self._read_lease()
        if holder:
            age = time.time() - float(holder.get("heartbeat_unix", 0))
            gone = holder_is_gone(holder)
            if age < self.stale_seconds and not gone:
                if holder.get("host") == socket.gethostname():  # a running process of this host
                    raise self._refuse(holder, f", heartbeat {age:.0f} s ago; stale after "
                                               f"{self.stale_seconds:.0f} s")
                raise self._refuse_maybe_stale(holder, age)
            logging.warning("Took over the stale lease %s of %s (%s).", self.path, describe(holder),
                            gone or f"last heartbeat {age:.0f} s ago")
        self._record = self._new_record()
        _OWN_TOKENS.add(self._record["token"])
        self._write_lease()
        time.sleep(min(1.0, self.heartbeat_seconds / 4))  # let a writer that raced us land
        now = self._read_lease()
        if not now or now.get("token") != self._record["token"]:
            _OWN_TOKENS.discard(self._record["token"])
            self._record = None
            raise self._refuse(now, ", taken at the same moment")
        self._thread = threading.Thread(target=self._heartbeat, name="albert-lease-heartbeat", daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                current = self._read_lease()
                if not current:  # missing or torn: read again before calling it lost (a rename may be under way)
                    time.sleep(min(1.0, self.heartbeat_seconds / 4))
                    current = self._read_lease()
                if not current or current.get("token") != self._record["token"]:
                    holder = describe(current) if current else "nobody (it was removed)"
                    logging.error("Lost the lease %s to %s: another writer took the folder over.",
                                  self.path, holder)
                    if self.on_lost is not None:
                        self.on_lost(f"the loss of the lease {self.path} to {holder}")
                    self.lost = True
                    return
                self._record["heartbeat_unix"] = time.time()
                self._write_lease()
            except Exception as e:  # noqa: BLE001 - a failed refresh is retried at the next beat
                logging.warning("Could not refresh the lease %s: %s", self.path, e)

    def _release_remote(self) -> None:
        import tensorflow as tf

        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        current = self._read_lease()
        if current and current.get("token") == self._record["token"]:
            tf.io.gfile.remove(self.path)
        _OWN_TOKENS.discard(self._record["token"])
        self._record = None

    # ----------------------------------------------------------- both
    @property
    def held(self) -> bool:
        return self._fd is not None or (self._record is not None and not self.local)

    def acquire(self) -> "FolderLock":
        """Takes the folder; `FolderLocked` when a live holder has it. Returns self."""
        if self.held:
            raise RuntimeError(f"{self.path} is held by this FolderLock already.")
        self._stop.clear()
        (self._acquire_local if self.local else self._acquire_remote)()
        return self

    def release(self) -> None:
        """Gives the folder back (nothing when not held)."""
        if not self.held:
            return
        (self._release_local if self.local else self._release_remote)()

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
