"""One writer per folder where folders are not local (review F4).

* a lost lease stops `albert-pretrain` after the step with a checkpoint and the
  "try again later" exit (before, `lock.lost` was set and nothing read it: two
  writers went on);
* a lease whose pid is this process's own, or a process started after the
  lease, is a dead holder's (before, a restarted container was refused,
  naming its own pid);
* a refusal over a lease that may be stale exits 75 and says when it is free;
* FUSE and network mounts (/proc/mounts) get the lease, not a per-host flock.

In-process on ram:// (TensorFlow's in-memory file system), and through the
binary for the refusal on a faked network mount.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from albert_tf import preemption
from pipelines import locking

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402


@pytest.fixture
def warnings(monkeypatch):
    logged = []
    monkeypatch.setattr(locking.logging, "warning", lambda fmt, *a: logged.append(fmt % a if a else fmt))
    return logged


def _write_lease(path, **record):
    """A lease at `path` as another process writes it (beside, then renamed over: never half a file)."""
    now = time.time()
    record = {"host": "host-b", "pid": 7, "program": "other-run", "started": "earlier", "started_unix": now,
              "heartbeat_unix": now, "token": "theirs", **record}
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path + ".tmp-test", "w") as f:
        f.write(json.dumps(record))
    tf.io.gfile.rename(path + ".tmp-test", path, overwrite=True)


# ------------------------------------------------------------ a lost lease
def test_a_lost_lease_stops_albert_pretrain_after_the_step_with_a_checkpoint_and_exit_75(tmp_path, monkeypatch):
    import flags.core_flags as albert_flags
    from albert_tf.bin import pretrain
    from albert_tf.training import reporting
    from tests.albert_tf.test_remote_paths import _run_main

    output_dir = "ram://lease-lost/run"
    lease = output_dir + "/.albert-lease"
    monkeypatch.setattr(locking, "HEARTBEAT_SECONDS", 0.1)
    held = []
    original_acquire, original_log = locking.FolderLock.acquire, reporting.MetricsLogger.log

    def acquire(self):
        held.append(self)
        return original_acquire(self)

    def log(self, step):  # another run takes the folder over after step 2 (a stall made our lease stale)
        original_log(self, step)
        if step == 2:
            deadline = time.time() + 60
            while not held[0].lost:  # written again while the heartbeat's own refresh may land over it
                assert time.time() < deadline, "the heartbeat never saw the new lease"
                _write_lease(lease)
                time.sleep(0.5)

    monkeypatch.setattr(locking.FolderLock, "acquire", acquire)
    monkeypatch.setattr(reporting.MetricsLogger, "log", log)
    albert_flags.define_all_pretraining_flags()
    with pytest.raises(preemption.Preempted) as stopped:
        _run_main(pretrain.main, "albert-pretrain", tl.pretrain_argv(tmp_path, output_dir, 6))
    assert stopped.value.exit_code == 75 and stopped.value.step == 2
    assert str(stopped.value) == (
        f"stopped by the loss of the lease {lease} to other-run pid 7 on host-b since earlier after step 2: "
        f"checkpoint {output_dir}/ckpt-2 written; run the same command again to resume from it (exit code 75).")
    assert tf.io.gfile.exists(f"{output_dir}/ckpt-2.index")
    assert not tf.io.gfile.glob(f"{output_dir}/ckpt-3*")
    assert json.loads(tf.io.gfile.GFile(lease).read())["token"] == "theirs"  # left to its new holder


def test_a_stop_requested_from_another_thread_reaches_the_watcher_entered_now_or_later():
    with preemption.PreemptionWatcher() as watcher:
        assert not watcher.should_stop()
        preemption.request_stop("the loss of the lease x")
        assert watcher.should_stop() and watcher.reason == "the loss of the lease x"
    preemption.request_stop("the loss of the lease y")  # before the loop's watcher exists
    with preemption.PreemptionWatcher() as later:
        assert later.should_stop() and later.reason == "the loss of the lease y"
    with preemption.PreemptionWatcher() as next_run:
        assert not next_run.should_stop()


# ------------------------------------------------------------ who is dead
def test_a_lease_naming_this_process_pid_is_a_previous_process_and_is_taken_over(warnings):
    folder = "ram://lease-own-pid/run"
    _write_lease(folder + "/.albert-lease", host=socket.gethostname(), pid=os.getpid(), token="before-restart")
    with locking.FolderLock(folder, "albert-pretrain"):
        pass
    assert len(warnings) == 1 and f"its pid {os.getpid()} is this process's own" in warnings[0], warnings
    # This process's own live lease is not taken over by a second lock of the same process.
    with locking.FolderLock(folder, "first"):
        with pytest.raises(locking.FolderLocked, match="in use by first pid") as refused:
            locking.FolderLock(folder, "second").acquire()
        assert not isinstance(refused.value, locking.LeaseMayBeStale)


def test_a_lease_whose_pid_started_after_it_was_taken_is_taken_over(warnings):
    folder = "ram://lease-reused-pid/run"
    newer = subprocess.Popen(["sleep", "60"])
    try:
        _write_lease(folder + "/.albert-lease", host=socket.gethostname(), pid=newer.pid,
                     started_unix=time.time() - 600)
        with locking.FolderLock(folder, "albert-pretrain"):
            pass
        assert len(warnings) == 1 and "is another process now (started after the lease" in warnings[0], warnings
        # A running process that started before the lease is its holder: refused (exit 1, it is alive).
        _write_lease(folder + "/.albert-lease", host=socket.gethostname(), pid=newer.pid,
                     started_unix=time.time())
        with pytest.raises(locking.FolderLocked) as refused:
            locking.FolderLock(folder, "albert-pretrain").acquire()
        assert not isinstance(refused.value, locking.LeaseMayBeStale)
    finally:
        newer.kill()
        newer.wait()


def test_a_refusal_over_another_hosts_lease_says_when_it_is_free_and_exits_75():
    folder = "ram://lease-other-host/run"
    beat = time.time() - 30
    _write_lease(folder + "/.albert-lease", heartbeat_unix=beat)
    with pytest.raises(locking.LeaseMayBeStale) as refused:
        locking.FolderLock(folder, "albert-pretrain").acquire()
    free = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(beat + 120))
    message = str(refused.value)
    assert message.startswith(f"{folder} is in use by other-run pid 7 on host-b since earlier (lease "
                              f"{folder}/.albert-lease, heartbeat 30 s ago; stale after 120 s): one writer per "
                              f"folder. If that run is gone, the lease is free at {free} (in "), message
    assert "run the same command again then (exit code 75)" in message
    assert refused.value.exit_code == 75 and isinstance(refused.value, locking.FolderLocked)


# ------------------------------------------------------------ mounts that look local
_MOUNTS = """sysfs /sys sysfs rw 0 0
/dev/sda1 / ext4 rw 0 0
bucket {root}/gcs fuse.gcsfuse rw,nosuid,nodev 0 0
server:/export {root}/nfs nfs4 rw 0 0
tmpfs {root}/gcs/cache tmpfs rw 0 0
"""


@pytest.fixture
def fake_mounts(tmp_path, monkeypatch):
    mounts = tmp_path / "mounts"
    mounts.write_text(_MOUNTS.format(root=tmp_path))
    monkeypatch.setattr(locking, "MOUNTS_FILE", str(mounts))
    return tmp_path


def test_network_and_fuse_mounts_are_found_in_proc_mounts(fake_mounts):
    root = fake_mounts
    assert locking.network_filesystem(str(root / "gcs" / "bucket" / "run")) == ("fuse.gcsfuse", str(root / "gcs"))
    assert locking.network_filesystem(str(root / "nfs" / "run")) == ("nfs4", str(root / "nfs"))
    assert locking.network_filesystem(str(root / "gcs" / "cache" / "x")) is None  # a local mount inside
    assert locking.network_filesystem(str(root / "local" / "run")) is None


def test_a_folder_on_a_fuse_mount_gets_the_lease_with_a_warning(fake_mounts, warnings):
    folder = str(fake_mounts / "gcs" / "run")
    with locking.FolderLock(folder, "albert-pretrain") as lock:
        assert not lock.local and lock.path == os.path.join(folder, ".albert-lease")
        assert os.path.exists(lock.path) and not os.path.exists(os.path.join(folder, ".albert-lock"))
    assert len(warnings) == 1 and warnings[0].startswith(
        f"{folder} is on a fuse.gcsfuse file system (mounted at {fake_mounts / 'gcs'}): one writer per folder "
        "is kept with a heartbeat lease"), warnings


# Runs albert-pretrain with locking.MOUNTS_FILE = argv[1] (a faked /proc/mounts); the rest of argv is its own.
_PRETRAIN_ON_FAKED_MOUNTS = """
import sys
from pipelines import locking
locking.MOUNTS_FILE = sys.argv[1]
from albert_tf.bin import pretrain
sys.argv = ["albert-pretrain"] + sys.argv[2:]
pretrain.run()
"""


def test_albert_pretrain_on_a_network_mount_refuses_another_hosts_lease_with_exit_75(fake_mounts):
    output_dir = fake_mounts / "nfs" / "run"
    _write_lease(str(output_dir / ".albert-lease"))
    argv = tl.pretrain_argv(fake_mounts, output_dir, 2)
    done = subprocess.run([sys.executable, "-c", _PRETRAIN_ON_FAKED_MOUNTS, str(fake_mounts / "mounts")] + argv,
                          cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 75, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("albert-pretrain: ")]
    assert len(lines) == 1 and lines[0].startswith(
        f"albert-pretrain: {output_dir} is in use by other-run pid 7 on host-b since earlier (lease "), done.stderr
    assert "If that run is gone, the lease is free at " in lines[0]
    assert "is on a nfs4 file system" in done.stderr
    assert not list(output_dir.glob("ckpt-*"))
