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
def mount_disk(tmp_path):
    """`mount_disk(size)`: a tmpfs of that size ("2m") under tmp_path, unmounted at the end."""
    mounted = []

    def mount_disk(size="2m"):
        mount = tmp_path / f"disk{len(mounted)}"
        mount.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(mount)
        return mount

    yield mount_disk
    for mount in mounted:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def small_disk(mount_disk):
    return mount_disk("2m")


def _fill(disk, leave_bytes):
    free = shutil.disk_usage(str(disk)).free
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def _run(binary, *args):
    return subprocess.run([os.path.join(BIN, binary), *args], capture_output=True, text=True,
                          timeout=300)


def test_pretrain_checkpoint_on_a_full_disk_then_resume(mount_disk, tmp_path):
    data = tl.write_tfrecords(str(tmp_path / "data" / "train.tfrecord"), 40, seed=3)
    config = str(tmp_path / "albert_config.json")
    tl.tiny_config().to_json_file(config)
    # 16 MB: a checkpoint holds the input's position too (its shuffle buffer and prefetched batches), more than
    # 2 MB for this input; the disk is filled below until less than one checkpoint fits.
    small_disk = mount_disk("16m")
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


# --------------------------------------------------------------------------- fine-tuning and export


def _full_disk_line(done, program, folder):
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{program}: No space left on device while writing to {folder} ("), line
    assert line.endswith("Free some space (or choose another folder) and run the same command again: it goes "
                         "on from there."), line
    return line


def _leftovers(folder):
    """Temporary names a cut write could leave (atomic_write's, safetensors', TensorFlow's, an export's)."""
    return [os.path.join(root, name) for root, dirs, files in os.walk(folder) for name in dirs + files
            if ".tmp" in name or name.endswith("_temp") or name.startswith(".reserved-")]


def test_finetune_on_a_full_disk_names_the_resume_checkpoint_then_resumes(mount_disk, tmp_path):
    from tests.albert_tf.test_preemption import _FINETUNE_SIGNALLED_AT, _finetune_flags

    disk = mount_disk("2m")
    out = disk / "ft"
    flags = _finetune_flags(tmp_path, out)  # 12 steps, epochs of 6; the model is saved at epoch ends
    # A preempted run leaves the resume checkpoint of step 2 (and no model yet).
    first = subprocess.run([sys.executable, "-c", _FINETUNE_SIGNALLED_AT, "2"] + flags, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 75, first.stderr[-3000:]
    checkpoint_bytes = sum(os.path.getsize(p) for p in tf.io.gfile.glob(str(out / "resume" / "ckpt-2*")))
    filler = _fill(disk, checkpoint_bytes // 2)  # neither the model (its spm.model) nor ckpt-6 fits
    full = _run("albert-finetune", *flags)
    line = _full_disk_line(full, "albert-finetune", out)
    assert f": last complete checkpoint {out / 'resume' / 'ckpt-2'}. Free" in line, line
    assert not (out / "task_config.json").exists() and not _leftovers(str(out))

    os.remove(filler)
    again = _run("albert-finetune", *flags)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"Resuming from {out / 'resume' / 'ckpt-2'}: 2 batch(es) done" in again.stderr
    assert faults.complete_task_model(str(out))

    # Evaluation and prediction files on a full disk: none written, nothing partial left.
    filler = _fill(disk, 0)
    evaluate = [f for f in flags if f not in ("--do_train", "--nodo_eval", "--nodo_predict")]
    evaluate += ["--nodo_train", "--do_eval", "--do_predict"]
    full = _run("albert-finetune", *evaluate)
    line = _full_disk_line(full, "albert-finetune", out)
    assert (f": the fine-tuned model in {out} is complete; last complete checkpoint "
            f"{out / 'resume' / 'ckpt-12'}. Free") in line, line
    assert not (out / "eval_results.txt").exists() and not _leftovers(str(out))
    os.remove(filler)
    again = _run("albert-finetune", *evaluate)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "accuracy = " in (out / "eval_results.txt").read_text()
    assert (out / "test_results.tsv").exists() and (out / "submit_results.tsv").exists()


def test_export_on_a_full_disk_keeps_the_complete_versions_only(mount_disk, finetuned_sst2):
    model = finetuned_sst2["model"]  # read only: the exports go to the small disk
    disk = mount_disk("6m")  # one SavedModel of the tiny classifier takes 2.4 MB
    exports = disk / "exports"
    args = [f"--checkpoint={model}", "--head=classifier", f"--export_dir={exports}"]
    first = _run("albert-export", *args)
    assert first.returncode == 0, first.stderr[-3000:]
    filler = _fill(disk, 1_000_000)
    full = _run("albert-export", *args)
    line = _full_disk_line(full, "albert-export", exports)
    assert f": last complete export {exports / '1'}. Free" in line, line
    assert sorted(os.listdir(exports)) == ["1"] and not _leftovers(str(exports))  # no .tmp-2, no .reserved-2

    os.remove(filler)
    again = _run("albert-export", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(os.listdir(exports)) == ["1", "2"]
    loaded = tf.saved_model.load(str(exports / "2"))
    assert "serving_default" in loaded.signatures
