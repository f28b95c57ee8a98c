"""SIGTERM / SIGINT: finish the step, checkpoint it, exit 75 with one line; the same command resumes exactly.

The binaries run in subprocesses as a user runs them. To send the signal at a
known step, the scripts below wrap the binary's `run()` and signal their own
process from inside the step's log call (as a scheduler would, at a moment
the test can name); `test_locking.py` sends SIGTERM from outside to the
installed `albert-pretrain`.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import preemption

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

# Signals its own process once step K (argv[1]) is logged; worker index
# SIGNAL_TASK only, under TF_CONFIG. The rest of argv is albert-pretrain's.
_PRETRAIN_SIGNALLED_AT = """
import json, os, signal, sys
from albert_tf.training import reporting
k, sig = int(sys.argv[1]), getattr(signal, os.environ.get("SIGNAL_NAME", "SIGTERM"))
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)
original = reporting.MetricsLogger.log

def log(self, step):
    original(self, step)
    if step == k and task == int(os.environ.get("SIGNAL_TASK", "0")):
        signal.raise_signal(sig)

reporting.MetricsLogger.log = log
from albert_tf.bin import pretrain
sys.argv = ["albert-pretrain"] + sys.argv[2:]
pretrain.run()
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("preemption")
    tl.write_tfrecords(str(root / "data" / "train-0.tfrecord"), 64, seed=3)
    # Dropout on: the resumed run must also draw the uninterrupted run's masks.
    tl.tiny_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1).to_json_file(
        str(root / "albert_config.json"))
    return root


def _pretrain_flags(workdir, output_dir, steps, *extra):
    return [f"--albert_config_file={workdir / 'albert_config.json'}",
            f"--input_file={workdir / 'data' / 'train-*.tfrecord'}", f"--output_dir={output_dir}",
            "--train_batch_size=8", "--max_seq_length=16", "--max_predictions_per_seq=3",
            f"--num_train_steps={steps}", "--num_warmup_steps=1", "--learning_rate=0.01",
            "--save_checkpoints_steps=100", "--log_steps=1", "--mixed_precision=float32", *extra]


def _run(cmd, env=None, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _signalled_at(step, flags, env=None):
    return _run([sys.executable, "-c", _PRETRAIN_SIGNALLED_AT, str(step)] + flags, env=env)


def _plain(flags, env=None):
    return _run([sys.executable, "-m", "albert_tf.bin.pretrain"] + flags, env=env)


def _variables(checkpoint):
    reader = tf.train.load_checkpoint(str(checkpoint))
    # save_counter counts the saves of one folder, not training state; the
    # input iterator's state (a variant, "input/") holds what it had
    # prefetched when saved, which depends on timing: it is compared by the
    # batches it yields, through the weights of the steps after it.
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not name.startswith(("save_counter", "input/"))}


def _assert_same_variables(got, want):
    assert sorted(got) == sorted(want)
    for name in want:  # weights, optimizer slots, step, dropout RNG state
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _preempted_line(stderr, program="albert-pretrain"):
    lines = [line for line in stderr.splitlines() if line.startswith(f"{program}: stopped by")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_pretrain_sigterm_checkpoints_the_step_and_the_rerun_equals_an_uninterrupted_run(workdir, tmp_path):
    # Two replicas (MirroredStrategy over 2 logical CPUs): the one-device loop is the same code.
    strategy = ["--strategy=mirrored", "--num_cpu_devices=2"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    done = _plain(_pretrain_flags(workdir, whole, 6, *strategy))
    assert done.returncode == 0, done.stderr[-3000:]

    first = _signalled_at(3, _pretrain_flags(workdir, stopped, 6, *strategy))
    assert first.returncode == preemption.EXIT_PREEMPTED == 75, first.stderr[-3000:]
    line = _preempted_line(first.stderr)
    assert line == (f"albert-pretrain: stopped by SIGTERM after step 3: checkpoint {stopped / 'ckpt-3'} "
                    "written; run the same command again to resume from it (exit code 75).")
    assert "step 4/6" not in first.stderr
    assert not (stopped / "model.weights.safetensors").exists()  # not a finished run
    at_3 = _variables(stopped / "ckpt-3")
    assert at_3["global_step/.ATTRIBUTES/VARIABLE_VALUE"] == 3

    again = _plain(_pretrain_flags(workdir, stopped, 6, *strategy))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Resumed from step 3" in again.stderr
    want = _variables(whole / "ckpt-6")
    assert any("rng" in name for name in want) and any("optimizer" in name for name in want)
    _assert_same_variables(_variables(stopped / "ckpt-6"), want)
    # The comparison sees a difference of three steps (it can fail).
    with pytest.raises(AssertionError):
        _assert_same_variables(at_3, want)


def _two_workers(flags, signal_step=None):
    """Both workers of a MultiWorkerMirroredStrategy run; worker 1 alone gets the signal."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in tl.free_ports(2)]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", SIGNAL_TASK="1", TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        cmd = ([sys.executable, "-c", _PRETRAIN_SIGNALLED_AT, str(signal_step)] if signal_step
               else [sys.executable, "-m", "albert_tf.bin.pretrain"])
        procs.append(subprocess.Popen(cmd + flags, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    errs = [p.communicate(timeout=300)[1] for p in procs]
    return [p.returncode for p in procs], errs


def test_multi_worker_sigterm_on_one_worker_stops_both_at_the_same_step(workdir, tmp_path):
    mw = ["--strategy=multi_worker_mirrored"]
    stopped = tmp_path / "stopped"
    codes, errs = _two_workers(_pretrain_flags(workdir, stopped, 5, *mw), signal_step=2)
    assert codes == [75, 75], errs[0][-3000:] + errs[1][-3000:]
    assert "stopped by another worker's signal after step 2" in _preempted_line(errs[0])
    assert "stopped by SIGTERM after step 2" in _preempted_line(errs[1])
    assert f"checkpoint {stopped / 'ckpt-2'} written" in _preempted_line(errs[1])
    assert (stopped / "ckpt-2.index").exists()
    # The other worker keeps only its newest copy (a resume reads its input position there), not
    # --keep_checkpoint_max of them.
    scratch = stopped / ".worker-worker-1"
    assert sorted(p.name for p in scratch.glob("ckpt-*.index")) == ["ckpt-2.index"]

    # Resuming under MultiWorkerMirroredStrategy is the existing machinery
    # (tests/albert_tf/test_training.py); what is new here is the agreement.
    assert not list(stopped.glob("ckpt-3*"))


# ---------------------------------------------------------------- fine-tuning
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm  # noqa: E402
from tests.albert_tf.tasks import finetune_data  # noqa: E402

_FINETUNE_SIGNALLED_AT = """
import os, signal, sys
from albert_tf.tasks import callbacks as cb
step = int(sys.argv[1])
original = cb.ProgressLogger.on_train_batch_end

def signal_at_step(self, batch, logs=None):
    original(self, batch, logs)
    if int(self.model.optimizer.iterations.numpy()) == step:
        signal.raise_signal(signal.SIGTERM)

cb.ProgressLogger.on_train_batch_end = signal_at_step
from albert_tf.bin import finetune
sys.argv = ["albert-finetune"] + sys.argv[2:]
finetune.run()
"""


def _finetune_flags(tmp_path, output_dir):
    """albert-finetune's flags for a 12-example SST-2 run into `output_dir`, with the vocabulary, config and data
    in `tmp_path` (made there unless already there: the shared folder of `finetuned_sst2` is read, never written)."""
    tmp_path = pathlib.Path(tmp_path)
    folder = tmp_path / "assets"
    config = folder / "albert_config.json"
    spm, data = folder / "sp.model", tmp_path / "SST-2"
    if not config.exists():
        folder.mkdir(exist_ok=True)
        spm = train_tiny_spm(str(folder))
        tiny_config().to_json_file(str(config))
        data = finetune_data.glue_sst2(str(data), n_train=12)
    # 12 examples, batch 4: 3 batches a pass; 4 epochs = 12 steps in 2 Keras epochs of 6.
    return [f"--task=glue/sst-2", f"--data_dir={data}", f"--output_dir={output_dir}",
            f"--albert_config_file={config}", f"--spm_model_file={spm}", "--max_seq_length=32",
            "--train_batch_size=4", "--eval_batch_size=8", "--learning_rate=1e-3", "--num_train_epochs=4",
            "--steps_per_epoch=6", "--warmup_proportion=0.1", "--strategy=default", "--mixed_precision=float32",
            "--seed=1", "--log_steps=1", "--do_train", "--nodo_eval", "--nodo_predict", "--optimizer=adamw",
            "--save_checkpoints_steps=1000"]


def _resume_state(output_dir):
    return _variables(os.path.join(output_dir, "resume"))


def test_finetune_sigterm_mid_epoch_saves_the_step_and_the_rerun_equals_an_uninterrupted_run(tmp_path,
                                                                                            finetuned_sst2):
    # The uninterrupted run is the shared one (tests/conftest.py), on the same vocabulary and data.
    root, whole, stopped = finetuned_sst2["root"], pathlib.Path(finetuned_sst2["model"]), tmp_path / "stopped"
    script = os.path.join(os.path.dirname(sys.executable), "albert-finetune")
    # Step 5 is mid-epoch, and no regular save is due (--save_checkpoints_steps=1000).
    first = _run([sys.executable, "-c", _FINETUNE_SIGNALLED_AT, "5"] + _finetune_flags(root, stopped))
    assert first.returncode == 75, first.stderr[-3000:]
    line = _preempted_line(first.stderr, "albert-finetune")
    assert line == (f"albert-finetune: stopped by SIGTERM after step 5: checkpoint {stopped / 'resume' / 'ckpt-5'} "
                    "written; run the same command again to resume from it (exit code 75).")
    state = _resume_state(stopped)
    assert state["batches/.ATTRIBUTES/VARIABLE_VALUE"] == 5
    assert (state["data_pass/.ATTRIBUTES/VARIABLE_VALUE"], state["pass_batch/.ATTRIBUTES/VARIABLE_VALUE"]) == (1, 2)
    assert state["epoch/.ATTRIBUTES/VARIABLE_VALUE"] == 0  # the half-done epoch is not counted as done
    again = _run([script] + _finetune_flags(root, stopped))
    assert again.returncode == 0, again.stderr[-3000:]
    want = _resume_state(whole)
    assert want["batches/.ATTRIBUTES/VARIABLE_VALUE"] == 12 and any("seed_states" in n for n in want)
    _assert_same_variables(_resume_state(stopped), want)
    with pytest.raises(AssertionError):  # the comparison sees seven steps of difference
        _assert_same_variables(state, want)


class _FakeResume:
    latest_checkpoint = "resume/ckpt-6"

    def __init__(self):
        self.saves = 0

    def save_now(self):
        self.saves += 1
        return "resume/ckpt-saved"


class _FakeModel:
    class optimizer:  # noqa: N801 - stands for model.optimizer
        iterations = tf.Variable(6, dtype=tf.int64)


def test_a_signal_on_the_last_batch_of_an_epoch_stops_after_the_epoch_end():
    from albert_tf.tasks.preemption import StopOnPreemption

    with preemption.PreemptionWatcher() as watcher:
        callback = StopOnPreemption(watcher, _FakeResume())
        callback.set_model(_FakeModel())
        callback.set_params({"steps": 3})
        callback.on_train_batch_end(0)  # no signal yet: trains on
        # SIGTERM, not SIGINT: a shell's background job starts with SIGINT
        # ignored, and the watcher rightly leaves an ignored signal alone.
        signal.raise_signal(signal.SIGTERM)
        assert watcher.reason == "SIGTERM"
        callback.on_train_batch_end(2)  # ends the epoch: dev evaluation and the epoch's save come first
        with pytest.raises(preemption.Preempted, match="after step 6: checkpoint resume/ckpt-6 written"):
            callback.on_epoch_end(0)
        assert callback.resume.saves == 0
        with pytest.raises(preemption.Preempted, match="checkpoint resume/ckpt-saved written"):
            callback.on_train_batch_end(1)  # mid-epoch: saves now
        assert callback.resume.saves == 1


def test_watcher_restores_the_handlers_and_a_second_signal_stops_at_once():
    before = signal.getsignal(signal.SIGTERM)
    caught = []
    signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))
    try:
        with preemption.PreemptionWatcher() as watcher:
            assert not watcher.should_stop() and watcher.reason is None
            signal.raise_signal(signal.SIGTERM)
            assert watcher.should_stop() and caught == []  # the first only sets the flag
            signal.raise_signal(signal.SIGTERM)  # the second goes to the previous handler
            assert caught == [signal.SIGTERM]
        signal.raise_signal(signal.SIGTERM)
        assert caught == [signal.SIGTERM] * 2  # the previous handler is back
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_stop_on_a_batch_a_periodic_save_wrote_does_not_write_it_again(tmp_path):
    """The grace period holds one write of the state, not two (review F15)."""
    import keras

    from albert_tf.tasks import callbacks as cb

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    resume = cb.ResumeCheckpoint(str(tmp_path), model, batches_per_pass=10, save_steps=2)
    resume.set_model(model)
    resume.set_params({"steps": 10})
    writes = []
    original = resume._manager.save
    resume._manager.save = lambda **kw: writes.append(kw) or original(**kw)
    resume.on_train_batch_end(0)
    resume.on_train_batch_end(1)  # the periodic save of batch 2
    assert resume.save_now().endswith("ckpt-2") and len(writes) == 1
    resume.on_train_batch_end(2)
    assert resume.save_now().endswith("ckpt-3") and len(writes) == 2  # a batch not saved yet is written


# Signals its own process while albert-pretrain checks its files (before the training loop), then runs on.
_PRETRAIN_SIGNALLED_AT_START = """
import signal, sys
from albert_tf.bin import pretrain
original = pretrain._check_files

def check_files(*args):
    signal.raise_signal(signal.SIGTERM)
    return original(*args)

pretrain._check_files = check_files
sys.argv = ["albert-pretrain"] + sys.argv[1:]
pretrain.run()
"""


def test_a_sigterm_before_the_training_loop_ends_in_one_line_and_exit_75(workdir, tmp_path):
    """Before, the process died of the signal with no line (rc -15), a remote lease left behind (review F12)."""
    done = _run([sys.executable, "-c", _PRETRAIN_SIGNALLED_AT_START] + _pretrain_flags(workdir, tmp_path / "run", 2))
    assert done.returncode == 75, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("albert-pretrain: ")]
    assert lines == ["albert-pretrain: stopped by SIGTERM outside a training step; nothing incomplete is taken "
                     "for complete: run the same command again to go on (exit code 75)."], done.stderr[-3000:]
    assert "Traceback" not in done.stderr and not list((tmp_path / "run").glob("ckpt-*"))
