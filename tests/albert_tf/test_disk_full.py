"""A full disk met through the installed binaries (issue 28, item 4): one line naming the
folder and what is complete in it, and the next run on a bigger disk goes on from there.

The disk is a 2 MB tmpfs (`mount -t tmpfs`, root only: the tests skip with the reason
elsewhere) filled with a file until less than one checkpoint / shard fits; "a bigger
disk" is that file removed. The helpers that find what is complete are tested on
their own first (albert_tf/bin/faults.py).
"""

import errno
import filecmp
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

from albert_tf.bin import common, faults  # noqa: E402

BIN = os.path.dirname(sys.executable)


# --------------------------------------------------------------------------- the helpers


def test_disk_full_is_found_in_the_error_a_failed_close_raised_during():
    assert faults.disk_full(OSError(errno.ENOSPC, "No space left on device"))
    try:
        try:
            raise tf.errors.ResourceExhaustedError(None, None, "/d/x.spill; No space left on device")
        except tf.errors.OpError:
            raise tf.errors.FailedPreconditionError(None, None, "/d/x.spill; Bad file descriptor")
    except tf.errors.OpError as error:
        assert faults.disk_full(error)
    assert not faults.disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not faults.disk_full(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating"))


def test_complete_outputs_names_the_checkpoint_the_state_file_names(tmp_path):
    folder = str(tmp_path)
    step = tf.Variable(0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(step=step), folder, max_to_keep=3)
    manager.save(checkpoint_number=2)
    manager.save(checkpoint_number=4)
    os.makedirs(os.path.join(folder, "ckpt-6_temp"))  # what a save cut by a full disk leaves
    assert faults.last_complete_checkpoint(folder) == os.path.join(folder, "ckpt-4")
    os.remove(os.path.join(folder, "ckpt-4.index"))  # named, but not complete
    assert faults.last_complete_checkpoint(folder) == os.path.join(folder, "ckpt-2")
    assert faults.last_complete_checkpoint(str(tmp_path / "nothing")) is None


def test_complete_outputs_names_shards_and_export_versions(tmp_path):
    for name in ("p-00000-of-00003.tfrecord", "p-00001-of-00003.tfrecord",
                 ".p-00002-of-00003.tfrecord.incomplete"):
        (tmp_path / name).write_bytes(b"x")
    for version in ("3", "12"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "saved_model.pb").write_bytes(b"x")
    (tmp_path / "13").mkdir()  # no saved_model.pb: not complete
    assert faults.complete_outputs(str(tmp_path)) == [
        f"2 complete shard(s), the last {tmp_path / 'p-00001-of-00003.tfrecord'}",
        f"last complete export {tmp_path / '12'}"]
    message = faults.disk_full_message(
        tf.errors.ResourceExhaustedError(None, None, f"{tmp_path}/13/x; No space left on device"),
        [str(tmp_path / "other"), str(tmp_path)])
    assert message.startswith(f"No space left on device while writing to {tmp_path} (")
    assert "2 complete shard(s)" in message and "run the same command again" in message


def test_op_error_line_skips_the_graph_execution_header():
    text = ("Graph execution error:\n\nDetected at node IteratorGetNext defined at (most recent call "
            "last):\n  File \"x.py\", line 3, in <module>\n\ncorrupted record at 1989\n\t [[{{node "
            "IteratorGetNext}}]] [Op:__inference_step_29]")
    assert common._op_error_line(text) == ["corrupted record at 1989"]
    assert common._op_error_line("one line\nand more") == ["one line"]


# --------------------------------------------------------------------------- a 2 MB disk


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(disk, leave_bytes):
    free = shutil.disk_usage(str(disk)).free
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def _run(binary, *args):
    return subprocess.run([os.path.join(BIN, binary), *args], capture_output=True, text=True,
                          timeout=300)


def test_pretrain_checkpoint_on_a_full_disk_then_resume(small_disk, tmp_path):
    data = tl.write_tfrecords(str(tmp_path / "data" / "train.tfrecord"), 40, seed=3)
    config = str(tmp_path / "albert_config.json")
    tl.tiny_config().to_json_file(config)
    out = small_disk / "run"

    def pretrain(steps):
        return _run("albert-pretrain", f"--albert_config_file={config}", f"--input_file={data}",
                    f"--output_dir={out}", "--train_batch_size=8", "--max_seq_length=16",
                    "--max_predictions_per_seq=3", f"--num_train_steps={steps}", "--num_warmup_steps=1",
                    "--save_checkpoints_steps=2", "--log_steps=1", "--mixed_precision=float32")

    first = pretrain(2)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint_bytes = sum(os.path.getsize(p) for p in tf.io.gfile.glob(str(out / "ckpt-2*")))
    filler = _fill(small_disk, checkpoint_bytes // 2)  # ckpt-4 cannot fit
    full = pretrain(6)
    assert full.returncode == 1, full.stderr[-3000:]
    line = full.stderr.strip().splitlines()[-1]
    assert line.startswith(f"albert-pretrain: No space left on device while writing to {out} (")
    assert f"last complete checkpoint {out / 'ckpt-2'}. Free some space" in line, line
    assert "SaveV2" not in line and "step 3/6" in full.stderr
    assert tf.train.latest_checkpoint(str(out)) == str(out / "ckpt-2")  # the cut save is not taken

    os.remove(filler)  # a bigger disk
    again = pretrain(6)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"Resumed from step 2 ({out / 'ckpt-2'})" in again.stderr
    assert tf.train.latest_checkpoint(str(out)) == str(out / "ckpt-6")


@pytest.fixture(scope="module")
def corpus_and_model(tmp_path_factory):
    from pipelines import tokenizer
    from tests.pipelines.conftest import write_corpus

    root = tmp_path_factory.mktemp("disk_full_corpus")
    corpus = write_corpus(str(root / "corpus.txt"), num_docs=60)
    model = tokenizer.train_sentencepiece([corpus], str(root / "sp"), vocab_size=120, seed=1)
    return corpus, model


def test_create_shards_on_a_full_disk_then_resume(small_disk, tmp_path, corpus_and_model):
    import pipelines

    corpus, model = corpus_and_model
    settings = dict(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2, num_shards=4)
    reference = str(tmp_path / "reference")
    pipelines.create_pretraining_data([corpus], model, reference, **settings)
    out = small_disk / "data"
    out.mkdir()
    # An interrupted run: shards 0 and 1 complete, 2 and 3 not written yet.
    for name in ("pretrain-00000-of-00004.tfrecord", "pretrain-00001-of-00004.tfrecord",
                 "pretrain.manifest.json"):
        shutil.copy(os.path.join(reference, name), out / name)
    filler = _fill(small_disk, os.path.getsize(os.path.join(reference, "pretrain-00002-of-00004.tfrecord")) // 2)
    args = [f"--input_file={corpus}", f"--spm_model_file={model}", f"--output_dir={out}",
            *[f"--{k}={v}" for k, v in settings.items()]]
    full = _run("albert-create-pretraining-data", *args)
    assert full.returncode == 1, full.stderr[-3000:]
    line = full.stderr.strip().splitlines()[-1]
    assert line.startswith(
        f"albert-create-pretraining-data: No space left on device while writing to {out} ("), line
    assert f"2 complete shard(s), the last {out / 'pretrain-00001-of-00004.tfrecord'}. " in line

    os.remove(filler)
    again = _run("albert-create-pretraining-data", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "shards written: 2, already complete: 2" in again.stderr
    names = sorted(n for n in os.listdir(reference))
    assert sorted(os.listdir(out)) == names  # no temporary file left
    assert [n for n in names if not filecmp.cmp(os.path.join(reference, n), out / n, shallow=False)] == []
