"""One writer per folder: the lock (local), the lease (remote), the binaries that take them, export versions."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import tensorflow as tf
from absl import logging

from pipelines import locking

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# Holds the lock of argv[1] and prints "held"; exits when stdin closes, or kills itself (-9) with argv[2] == "die".
_HOLDER = """
import os, signal, sys
from pipelines import locking
lock = locking.FolderLock(sys.argv[1], "holder-program").acquire()
print("held", flush=True)
if sys.argv[2] == "die":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()
lock.release()
"""


def _holder(folder, mode="wait"):
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder), mode], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held", proc.stderr.read()
    return proc


@pytest.fixture
def warnings(monkeypatch):
    logged = []
    monkeypatch.setattr(logging, "warning", lambda fmt, *a: logged.append(fmt % a if a else fmt))
    monkeypatch.setattr(locking.logging, "warning", lambda fmt, *a: logged.append(fmt % a if a else fmt))
    return logged


def test_a_second_process_is_refused_naming_the_holder_until_it_ends(tmp_path, warnings):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(locking.FolderLocked) as refused:
            locking.FolderLock(str(tmp_path), "second").acquire()
        message = str(refused.value)
        assert f"{tmp_path} is in use by holder-program pid {holder.pid} on {socket.gethostname()} since " in message
        assert f"(lock {tmp_path / '.albert-lock'})" in message and "\n" not in message
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    with locking.FolderLock(str(tmp_path), "second") as lock:  # released cleanly: no takeover line
        assert lock.held
        record = json.loads((tmp_path / ".albert-lock").read_text())
        assert record["pid"] == os.getpid() and record["program"] == "second"
    assert warnings == []
    assert not (tmp_path / ".albert-lock").exists()  # removed on a clean release


def test_the_lock_of_a_killed_process_is_taken_over_with_a_log_line(tmp_path, warnings):
    holder = _holder(tmp_path, "die")
    assert holder.wait(timeout=60) == -signal.SIGKILL
    with locking.FolderLock(str(tmp_path), "next"):
        pass
    assert len(warnings) == 1 and f"holder-program pid {holder.pid}" in warnings[0], warnings
    assert "no longer running" in warnings[0]


def test_workers_have_their_own_locks_and_one_process_cannot_take_a_lock_twice(tmp_path):
    with locking.FolderLock(str(tmp_path), "w0", locking.lock_name(0, 2)), \
            locking.FolderLock(str(tmp_path), "w1", locking.lock_name(1, 2)):
        with pytest.raises(locking.FolderLocked, match="in use by w1 pid"):
            locking.FolderLock(str(tmp_path), "w1 again", locking.lock_name(1, 2)).acquire()


def test_remote_lease_refuses_a_live_holder_heartbeats_and_is_released(warnings):
    folder = "ram://locking/live"
    # Heartbeats every 0.5 s, stale after 2 s: a stall of the test process under load (shared cores) shorter
    # than 2 s cannot make the live lease look stale.
    first = locking.FolderLock(folder, "first", heartbeat_seconds=0.5).acquire()
    try:
        path = folder + "/.albert-lease"
        beat = json.loads(tf.io.gfile.GFile(path).read())["heartbeat_unix"]
        with pytest.raises(locking.FolderLocked, match=r"in use by first pid .* \(lease ram://locking/live/"
                                                       r"\.albert-lease, heartbeat [01] s ago; stale after 2 s\)"):
            locking.FolderLock(folder, "second", heartbeat_seconds=0.5).acquire()
        time.sleep(1.6)
        assert json.loads(tf.io.gfile.GFile(path).read())["heartbeat_unix"] > beat  # refreshed by the thread
    finally:
        first.release()
    assert not tf.io.gfile.exists(folder + "/.albert-lease")
    with locking.FolderLock(folder, "second", heartbeat_seconds=0.2):
        pass
    assert warnings == []


def _stale_lease(folder, age_seconds, host="other-host", pid=12345):
    tf.io.gfile.makedirs(folder)
    if tf.io.gfile.exists(folder + "/.albert-lease"):
        tf.io.gfile.remove(folder + "/.albert-lease")  # ram:// appends to an existing file
    with tf.io.gfile.GFile(folder + "/.albert-lease", "w") as f:
        f.write(json.dumps({"host": host, "pid": pid, "program": "old-run", "started": "earlier",
                            "heartbeat_unix": time.time() - age_seconds, "token": "old"}))


def test_remote_lease_older_than_its_heartbeats_is_taken_over_with_a_log_line(warnings):
    folder = "ram://locking/stale"
    # Ages far from the limit (4 heartbeats of 5 s = 20 s) both ways, so that no stall of the test flips them.
    _stale_lease(folder, age_seconds=5.0)  # 5 s < 20 s: alive
    with pytest.raises(locking.FolderLocked, match="in use by old-run pid 12345 on other-host"):
        locking.FolderLock(folder, "new", heartbeat_seconds=5.0).acquire()
    _stale_lease(folder, age_seconds=60.0)  # 60 s > 20 s: stale
    with locking.FolderLock(folder, "new", heartbeat_seconds=5.0):
        pass
    assert len(warnings) == 1 and "Took over the stale lease" in warnings[0]
    assert "old-run pid 12345 on other-host" in warnings[0] and "last heartbeat 60 s ago" in warnings[0]


def test_remote_lease_of_a_dead_pid_on_this_host_is_taken_over_at_once(warnings):
    folder = "ram://locking/dead"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _stale_lease(folder, age_seconds=0, host=socket.gethostname(), pid=dead.pid)
    with locking.FolderLock(folder, "new", heartbeat_seconds=0.2):
        pass
    assert len(warnings) == 1 and "its process is gone" in warnings[0]


# ------------------------------------------------------------ the binaries
def _pretrain_command(workdir, output_dir, steps):
    script = os.path.join(os.path.dirname(sys.executable), "albert-pretrain")
    return [script, f"--albert_config_file={workdir / 'albert_config.json'}",
            f"--input_file={workdir / 'data' / 'train-*.tfrecord'}", f"--output_dir={output_dir}",
            "--train_batch_size=8", "--max_seq_length=16", "--max_predictions_per_seq=3",
            f"--num_train_steps={steps}", "--num_warmup_steps=1", "--save_checkpoints_steps=100000",
            "--log_steps=1", "--mixed_precision=float32"]


def _refused_while_running(first_cmd, marker, second_cmd, program):
    """Starts `first_cmd`, waits for `marker` in its log, runs `second_cmd` (refused: exit 1, one
    line), then stops the first with SIGTERM from outside (exit 75, as preempted).

    Returns:
        (the first's pid, the second's line, the second's stderr, the first's log lines).
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    first = subprocess.Popen(first_cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    log = []
    reader = threading.Thread(target=lambda: log.extend(first.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 240
        while not any(marker in line for line in log):
            assert first.poll() is None and time.time() < deadline, "".join(log)[-3000:]
            time.sleep(0.2)
        second = subprocess.run(second_cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
        assert second.returncode == 1, second.stderr[-3000:]
        lines = [line for line in second.stderr.splitlines() if line.startswith(f"{program}:")]
        assert len(lines) == 1, second.stderr[-3000:]
        first.send_signal(signal.SIGTERM)  # as a scheduler does, at whatever step it has reached
        assert first.wait(timeout=120) == 75
    finally:
        if first.poll() is None:
            first.kill()
    reader.join(timeout=10)
    return first.pid, lines[0], second.stderr, log


def test_installed_albert_pretrain_refuses_a_second_run_and_stops_on_sigterm_from_outside(tmp_path):
    sys.path.insert(0, HERE)
    import training_testlib as tl

    tl.write_tfrecords(str(tmp_path / "data" / "train-0.tfrecord"), 32, seed=3)
    tl.tiny_config().to_json_file(str(tmp_path / "albert_config.json"))
    out = tmp_path / "run"
    pid, line, second, log = _refused_while_running(
        _pretrain_command(tmp_path, out, 10 ** 6), "step 2/1000000", _pretrain_command(tmp_path, out, 5),
        "albert-pretrain")
    assert f"{out} is in use by albert-pretrain pid {pid} on {socket.gethostname()} since " in line, line
    assert not any("step 1/5" in line for line in second.splitlines())
    stopped = [line for line in log if line.startswith("albert-pretrain: stopped by SIGTERM after step ")]
    assert len(stopped) == 1, "".join(log)[-3000:]
    step = int(stopped[0].split("after step ")[1].split(":")[0])
    assert step >= 2 and f"checkpoint {out / f'ckpt-{step}'} written" in stopped[0]
    assert (out / f"ckpt-{step}.index").exists()
    assert not (out / ".albert-lock").exists()  # released on the way out


def test_data_creation_workers_lock_their_own_share_only(tmp_path):
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    corpus = write_corpus(str(tmp_path / "corpus.txt"), num_docs=20)
    spm = tokenizer.train_sentencepiece([corpus], str(tmp_path / "sp"), vocab_size=120, seed=1)
    out = tmp_path / "data"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

    def worker(index):
        return subprocess.run(
            [sys.executable, "-m", "pipelines.bin.create_pretraining_data", f"--input_file={corpus}",
             f"--spm_model_file={spm}", f"--output_dir={out}", "--max_seq_length=32", "--max_predictions_per_seq=5",
             "--dupe_factor=1", "--num_shards=2", "--num_workers=2", f"--shard_index={index}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300)

    # A live worker 0 (this process holds its lock): a second worker 0 is refused, worker 1 runs.
    with locking.FolderLock(str(out), "worker-0", locking.lock_name(0, 2)):
        refused = worker(0)
        assert refused.returncode == 1, refused.stderr[-3000:]
        lines = [l for l in refused.stderr.splitlines() if l.startswith("albert-create-pretraining-data:")]
        assert len(lines) == 1 and f"is in use by worker-0 pid {os.getpid()}" in lines[0], refused.stderr[-3000:]
        assert ".albert-lock-worker-0-of-2" in lines[0]
        done = worker(1)
        assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in out.glob("pretrain-*.tfrecord")) == ["pretrain-00001-of-00002.tfrecord"]
    assert not list(out.glob(".albert-lock*"))  # both locks gone


# ---------------------------------------------------------- export versions
def test_concurrent_exports_reserve_distinct_versions(tmp_path):
    from albert_tf.export import versions

    folder = str(tmp_path / "exports")
    os.makedirs(os.path.join(folder, "2"))  # an existing version
    barrier, got = threading.Barrier(8), []

    def export():
        barrier.wait()
        got.append(versions._choose_version(folder, None))

    threads = [threading.Thread(target=export) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(3, 11))  # without reservations several get 3
    assert versions.next_version(folder) == 11  # reserved numbers count as taken
    for v in got:
        versions.release_version(folder, v)
    assert sorted(os.listdir(folder)) == ["2"]
    # A reservation left by a killed export is skipped, not reused.
    os.mkdir(os.path.join(folder, ".reserved-3"))
    assert versions._choose_version(folder, None) == 4
    versions.release_version(folder, 4)
    versions.release_version(folder, 3)  # not ours: kept
    assert sorted(os.listdir(folder)) == [".reserved-3", "2"]


# ------------------------------------------------ albert-finetune and albert-export, as installed
def _installed(name):
    return os.path.join(os.path.dirname(sys.executable), name)


def test_installed_albert_finetune_refuses_a_second_run_on_its_output_dir(tmp_path):
    from tests.albert_tf.test_preemption import _finetune_flags

    out = tmp_path / "ft"
    flags = [f for f in _finetune_flags(tmp_path, out) if not f.startswith("--num_train_epochs")]
    command = [_installed("albert-finetune"), *flags]
    pid, line, second, _ = _refused_while_running(
        command + ["--num_train_epochs=1000"], " step 2/", command + ["--num_train_epochs=4"], "albert-finetune")
    assert line.startswith(f"albert-finetune: --output_dir: {out} is in use by albert-finetune pid {pid} on "
                           f"{socket.gethostname()} since "), line
    assert f"(lock {out / '.albert-lock'})" in line
    assert "Training glue/sst-2" not in second  # refused before any work
    assert not (out / ".albert-lock").exists()  # the first released it on the way out


def test_two_installed_albert_exports_at_once_get_distinct_versions(tmp_path, finetuned_sst2):
    model = finetuned_sst2["model"]  # read only: the exports go to tmp_path
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    exports = tmp_path / "exports"
    # Both choose a number while the other is still writing (a save takes seconds): without the
    # reservation both take 1 and the second rename fails.
    procs = [subprocess.Popen([_installed("albert-export"), f"--checkpoint={model}", "--head=classifier",
                               f"--export_dir={exports}"], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs[0][-3000:] + "\n----\n" + errs[1][-3000:]
    written = sorted(re.search(r"Exported the classifier of \S+ to (\S+) ", e).group(1) for e in errs)
    assert written == [str(exports / "1"), str(exports / "2")], written
    assert sorted(os.listdir(exports)) == ["1", "2"]  # no reservation or temporary folder left
    for version in ("1", "2"):
        assert "serving_default" in tf.saved_model.load(str(exports / version)).signatures
