"""The resume columns of the contract matrix for the encoder and the pretrainer: albert-pretrain (issue 29).

The installed `albert-pretrain` trains the pretrainer (and so the encoder) on
shards that the installed `albert-create-pretraining-data` wrote, through the
binary's own input pipeline: files and records shuffled, dynamic masking
(fresh masks every pass), dropout on. 40 steps of 16 cross the 168 records
three times, so resuming must also restore the reshuffles and the masks of
later passes.

- kill -9 mid-run, then the same command: every variable of the last
  checkpoint (weights, optimizer slots and step, dropout RNG state) equals an
  uninterrupted run's exactly. The run's data position (the input
  iterator's state, files, shuffle buffer and all) is saved in each
  checkpoint and restored without reading the consumed records again
  (`albert_tf.training.train_input`).
- a rerun of a finished run trains nothing and changes no file (the model
  folder is written again, with the same bytes);
- a rerun with another batch size, max_seq_length, seed, masking or input
  files is refused in one line naming the setting and both values, and
  changes nothing.

The killed run's stderr is a pipe of one page: the test sends SIGKILL as
soon as it reads that step 6 is logged (after ckpt-4), and stops reading, so
however slowly the test gets there the binary blocks in a log call within
about 20 lines (a few steps) and cannot reach step 40 first.
"""

import fcntl
import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from tests.albert_tf.task_testlib import tiny_config
from tests.albert_tf.test_preemption import _assert_same_variables, _variables
from tests.contracts.conftest import file_digests

BIN = os.path.dirname(sys.executable)
STEPS = 40
KILL_AFTER = "step 6/40 "  # after ckpt-4 (a checkpoint every 4 steps)
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _pretrain_argv(data, output_dir):
    return [os.path.join(BIN, "albert-pretrain"), f"--albert_config_file={data['config']}",
            f"--input_file={os.path.join(data['shards'], '*.tfrecord')}", f"--output_dir={output_dir}",
            f"--spm_model_file={data['spm']}", "--train_batch_size=16", "--max_seq_length=32",
            "--max_predictions_per_seq=5", f"--num_train_steps={STEPS}", "--num_warmup_steps=2",
            "--learning_rate=0.01", "--save_checkpoints_steps=4", "--log_steps=1", "--masking=dynamic",
            "--mixed_precision=float32", "--strategy=default", "--seed=3"]


def _kill_9_mid_run(argv):
    """Runs argv; once KILL_AFTER is logged, stops reading its stderr (one page) and kills it with SIGKILL."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=ENV)
    fcntl.fcntl(proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, 4096)
    seen = []
    try:
        for line in iter(proc.stderr.readline, b""):
            seen.append(line.decode("utf-8", "replace"))
            if KILL_AFTER in seen[-1]:
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        proc.stderr.close()
    return proc.returncode, "".join(seen)


@pytest.fixture(scope="module")
def pretraining(contract_assets, tmp_path_factory):
    """Shards of the data tool; an uninterrupted run ("whole") and, beside it, the killed one ("killed")."""
    from tests.pipelines.conftest import write_corpus

    root = tmp_path_factory.mktemp("pretrain_resume")
    data = {"spm": contract_assets["spm"], "shards": str(root / "shards"), "config": str(root / "config.json")}
    tiny_config(dropout=0.1).to_json_file(data["config"])  # dropout on: its RNG state must resume too
    corpus = write_corpus(str(root / "corpus.txt"), num_docs=40, seed=3)
    made = subprocess.run([os.path.join(BIN, "albert-create-pretraining-data"), f"--input_file={corpus}",
                           f"--spm_model_file={data['spm']}", f"--output_dir={data['shards']}",
                           "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1",
                           "--num_shards=2", "--random_seed=1"], env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    whole, killed = str(root / "whole"), str(root / "killed")
    with open(root / "whole.log", "w") as log:  # a file: nothing blocks while this process reads the other
        uninterrupted = subprocess.Popen(_pretrain_argv(data, whole), stderr=log, stdout=log, env=ENV)
    try:
        kill = _kill_9_mid_run(_pretrain_argv(data, killed))
        assert uninterrupted.wait(timeout=300) == 0, (root / "whole.log").read_text()[-3000:]
    finally:
        if uninterrupted.poll() is None:
            uninterrupted.kill()
    return dict(data, whole=whole, killed=killed, kill=kill)


def _step(checkpoint):
    return int(tf.train.load_checkpoint(checkpoint).get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE"))


def test_albert_pretrain_killed_mid_run_then_rerun_equals_an_uninterrupted_run(pretraining):
    returncode, log = pretraining["kill"]
    assert returncode == -signal.SIGKILL, log[-3000:]
    killed = pretraining["killed"]
    at_kill = tf.train.latest_checkpoint(killed)
    step_at_kill = _step(at_kill)
    assert 4 <= step_at_kill < STEPS, at_kill  # mid-run: a checkpoint, and steps still to go
    assert not os.path.exists(os.path.join(killed, "model.weights.safetensors"))
    state_at_kill = _variables(at_kill)

    again = subprocess.run(_pretrain_argv(pretraining, killed), env=ENV, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"Resumed from step {step_at_kill}" in again.stderr
    assert f"Input position restored from {at_kill} " in again.stderr  # not read again
    want = _variables(os.path.join(pretraining["whole"], f"ckpt-{STEPS}"))
    assert any(name.startswith("optimizer/_variables/") for name in want), sorted(want)  # LAMB's slots
    assert any("rng" in name for name in want), sorted(want)  # the dropout seed state
    _assert_same_variables(_variables(os.path.join(killed, f"ckpt-{STEPS}")), want)
    with pytest.raises(AssertionError):  # the comparison sees the steps the killed run had not made
        _assert_same_variables(state_at_kill, want)


def test_albert_pretrain_rerun_of_a_finished_run_changes_nothing(pretraining):
    whole = pretraining["whole"]
    before = file_digests(whole)
    assert f"ckpt-{STEPS}.index" in before and "model.weights.safetensors" in before
    rerun = subprocess.run(_pretrain_argv(pretraining, whole), env=ENV, capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"Resumed from step {STEPS}" in rerun.stderr
    assert f"step {STEPS}/{STEPS} " not in rerun.stderr and "Saved checkpoint" not in rerun.stderr
    assert file_digests(whole) == before


# One changed setting per case: a step would no longer mean the same examples.
CHANGES = {"batch_size": ("--train_batch_size=8", "train_batch_size", 16, 8),
           "max_seq_length": ("--max_seq_length=24", "max_seq_length", 32, 24),
           "seed": ("--seed=4", "seed", 3, 4),  # other shuffles and dynamic masks
           "masking": ("--masking=static", "masking", "dynamic", "static")}


def _refusal_in_process(argv):
    """albert-pretrain's main in this process on `argv` (every flag explicit): the message of the error it raises.

    The one-line formatting of a refusal by the installed binary is checked once ("batch_size" below); the other
    settings are refused by the same check, without a TensorFlow start-up each.
    """
    from absl import flags

    import flags.core_flags as albert_flags
    from albert_tf.bin import pretrain

    albert_flags.define_all_pretraining_flags()  # as albert-pretrain's run() does (once per process)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["albert-pretrain", *argv[1:]])
    try:
        with pytest.raises(BaseException) as raised:  # main turns its refusal into SystemExit("albert-pretrain: ...")
            pretrain.main(["albert-pretrain"])
    finally:
        flags.FLAGS.unparse_flags()
    message = str(raised.value)
    return message[len("albert-pretrain: "):] if message.startswith("albert-pretrain: ") else message


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_albert_pretrain_rerun_with_another_setting_is_refused_naming_it(pretraining, change):
    whole = pretraining["whole"]
    before = file_digests(whole)
    flag, name, old, new = CHANGES[change]
    checkpoint = os.path.join(whole, f"ckpt-{STEPS}")
    if change == "batch_size":  # through the installed binary: one line on stderr, exit status 1
        rerun = subprocess.run(_pretrain_argv(pretraining, whole) + [flag], env=ENV, capture_output=True,
                               text=True, timeout=300)
        assert rerun.returncode == 1, rerun.stderr[-3000:]
        last = rerun.stderr.strip().splitlines()[-1]
        assert last.startswith("albert-pretrain: "), last
        message = last[len("albert-pretrain: "):]
    elif change == "max_seq_length":  # shards of another length are refused first, as their manifest says 32
        first = _refusal_in_process(_pretrain_argv(pretraining, whole) + [flag])
        assert first.startswith("--max_seq_length=24 (the shards: 32): ") and "train with --max_seq_length=32 " \
            in first, first
        # without the shard check, the resume check still names the setting
        message = _refusal_in_process(_pretrain_argv(pretraining, whole) + [flag, "--verify_shards=none"])
    else:
        message = _refusal_in_process(_pretrain_argv(pretraining, whole) + [flag])
    assert "\n" not in message, message
    assert message.startswith(f"Cannot resume {checkpoint} with {name}={new}: it was trained with "
                              f"{name}={old} "), message
    assert f"Resume with --{name}={old}, or start a new --output_dir" in message, message
    assert file_digests(whole) == before


def test_albert_pretrain_rerun_on_other_input_files_is_refused(pretraining, tmp_path):
    whole = pretraining["whole"]
    before = file_digests(whole)
    one_shard = sorted(os.listdir(pretraining["shards"]))[0]
    argv = [arg if not arg.startswith("--input_file=") else f"--input_file={os.path.join(pretraining['shards'], one_shard)}"
            for arg in _pretrain_argv(pretraining, whole)]
    message = _refusal_in_process(argv)
    assert "with input_files=1 files, names sha256 " in message and "it was trained with input_files=2 files" in message, message
    assert "Resume with --input_file matching the same files (2 files, names sha256 " in message, message
    assert file_digests(whole) == before
