"""--on_nonfinite=rollback (issue 28, item 5): training that heals itself.

The input is one shard of records whose masked-LM weights are all zero (the
loss is the sentence-order loss, about 0.69), with two crafted records among
them: one whose masked-LM weight is NaN (the whole batch's loss is NaN) and
one with real masked-LM weights (its batch's loss is about 5.4, eight times
the median). Runs go through the installed `albert-pretrain` as a user runs
it; where a run must die at a known moment, a wrapper signals its own process
right after the Nth rollback (a scheduler's SIGTERM, or SIGKILL).
"""

import glob
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import healing
from albert_tf.training.configs import MAX_LOSS_SPIKE_WINDOW, RecoveryConfig

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402
from tests.albert_tf.test_preemption import _assert_same_variables, _variables  # noqa: E402

BIN = os.path.join(os.path.dirname(sys.executable), "albert-pretrain")
STEPS = 30

# albert-pretrain that sends itself SIGNAL_NAME right after rollback number argv[1].
_SIGNALLED_AFTER_ROLLBACK = """
import os, signal, sys
from albert_tf.training import healing
k, sig = int(sys.argv[1]), getattr(signal, os.environ["SIGNAL_NAME"])
original = healing.Healer.rollback

def rollback(self, event):
    restored = original(self, event)
    if int(self.state.recovery.rollbacks.numpy()) == k:
        signal.raise_signal(sig)
    return restored

healing.Healer.rollback = rollback
from albert_tf.bin import pretrain
sys.argv = ["albert-pretrain"] + sys.argv[2:]
pretrain.run()
"""
_EVENT = re.compile(r"Rollback (\d+) of at most (\d+): (.*) at step (\d+); restored (\S+) \(step (\d+)\) and "
                    r"skipped the input of steps? ([\d-]+) \(input batch(?:es)? ([\d-]+)\)(.*)\.$")


def _int64(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _record(rng, kind):
    """A record of tl's shapes; kind "plain" (no masked-LM weight), "nan" or "spike"."""
    length = int(rng.integers(6, tl.SEQ + 1))
    ids = np.zeros(tl.SEQ, np.int64)
    ids[:length] = rng.integers(5, tl.VOCAB, size=length)
    ids[0], ids[length - 1] = 2, 3
    positions = np.array([1, 2, 0])
    labels = np.append(ids[positions[:2]], 0)
    ids[positions[:2]] = 4
    weights = {"plain": [0, 0, 0], "nan": [np.nan, 0, 0], "spike": [1, 1, 0]}[kind]
    feature = {
        "input_ids": _int64(ids), "input_mask": _int64(np.arange(tl.SEQ) < length),
        "segment_ids": _int64(np.zeros(tl.SEQ)), "token_boundary": _int64(np.ones(tl.SEQ)),
        "masked_lm_positions": _int64(positions), "masked_lm_ids": _int64(labels),
        "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights)),
        "next_sentence_labels": _int64([rng.integers(0, 2)]),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("rollback")
    rng = np.random.default_rng(0)
    # 160 records: 20 steps of 8 an epoch, so each crafted record is met once in 30 steps
    # (rollbacks skip a few batches).
    kinds = ["plain"] * 160
    kinds[53], kinds[106] = "nan", "spike"
    os.makedirs(root / "data")
    with tf.io.TFRecordWriter(str(root / "data" / "train-0.tfrecord")) as writer:
        for kind in kinds:
            writer.write(_record(rng, kind))
    tl.tiny_config().to_json_file(str(root / "albert_config.json"))
    return root


def _flags(workdir, output_dir, *extra):
    return [f"--albert_config_file={workdir / 'albert_config.json'}",
            f"--input_file={workdir / 'data' / 'train-0.tfrecord'}", f"--output_dir={output_dir}",
            "--train_batch_size=8", "--max_seq_length=16", "--max_predictions_per_seq=3",
            f"--num_train_steps={STEPS}", "--num_warmup_steps=1", "--learning_rate=0.01",
            "--save_checkpoints_steps=4", "--log_steps=1", "--mixed_precision=float32", *extra]


def _run(cmd, env=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def _events(stderr):
    return [_EVENT.search(line).groups() for line in stderr.splitlines() if _EVENT.search(line)]


def _last_line(done, program="albert-pretrain"):
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"{program}: ")]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def _assert_every_checkpoint_finite(folder):
    indexes = glob.glob(os.path.join(folder, "ckpt-*.index"))
    assert indexes
    for index in indexes:
        for name, value in _variables(index[:-len(".index")]).items():
            if np.issubdtype(np.asarray(value).dtype, np.floating):
                assert np.isfinite(value).all(), (index, name)


def _recovery(checkpoint):
    values = _variables(checkpoint)
    return {key: values[f"recovery/{key}/.ATTRIBUTES/VARIABLE_VALUE"].item()
            for key in ("data_offset", "rollbacks", "lr_scale", "losses_seen")}


ROLLBACK = ("--on_nonfinite=rollback", "--loss_spike_window=4", "--rollback_learning_rate_factor=0.5")
MIRRORED = ("--strategy=mirrored", "--num_cpu_devices=2")


@pytest.fixture(scope="module")
def uninterrupted(workdir):
    out = workdir / "whole"
    done = _run([BIN] + _flags(workdir, out, *ROLLBACK, *MIRRORED))
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done


def test_stop_is_the_default_and_names_the_step_the_crafted_record_breaks(workdir, uninterrupted):
    out = workdir / "stopped"
    done = _run([BIN] + _flags(workdir, out))
    assert done.returncode == 1
    nan_step = int(_events(uninterrupted[1].stderr)[0][3])
    good = 4 * ((nan_step - 1) // 4)
    assert _last_line(done) == (f"albert-pretrain: Loss is nan at step {nan_step}. Last good checkpoint: "
                                f"{out / f'ckpt-{good}'}. Lower --learning_rate, check the data, or use float32.")
    _assert_every_checkpoint_finite(str(out))


def test_rollback_restores_skips_the_window_and_finishes_with_finite_weights(uninterrupted):
    out, done = uninterrupted
    events = _events(done.stderr)
    assert len(events) == 2, done.stderr[-3000:]
    (n1, most, reason1, s1, path1, c1, steps1, batches1, rate1), second = events
    assert (n1, most, reason1, rate1) == ("1", "3", "loss nan", "; learning rate x0.5 from now on")
    s1, c1 = int(s1), int(c1)
    # The last checkpoint before the bad step (every 4 steps), and all the steps read since.
    assert (c1, path1) == (4 * ((s1 - 1) // 4), str(out / f"ckpt-{c1}"))
    assert steps1 == batches1 == (f"{c1 + 1}-{s1}" if s1 > c1 + 1 else str(s1))
    n2, _, reason2, s2, path2, c2, steps2, batches2, rate2 = second
    assert re.fullmatch(r"loss 5\.\d+ is above 2 x the median 0\.\d+ of the last 4 steps", reason2), reason2
    s2, c2 = int(s2), int(c2)
    # The input after the first event: step t reads batch t + (s1 - c1).
    first_batch = c2 + 1 + s1 - c1
    assert batches2 == (f"{first_batch}-{s2 + s1 - c1}" if s2 > c2 + 1 else str(first_batch))
    assert (n2, rate2) == ("2", "; learning rate x0.25 from now on")
    # The learning rate logged for step c1 + 1 before the rollback and after it: halved.
    lrs = [float(m.group(1)) for m in re.finditer(rf"step {c1 + 1}/{STEPS} .* lr (\S+) ", done.stderr)]
    assert len(lrs) == 2 and lrs[1] == pytest.approx(lrs[0] / 2, rel=1e-2), lrs

    assert tf.train.latest_checkpoint(str(out)) == str(out / f"ckpt-{STEPS}")
    assert _recovery(out / f"ckpt-{STEPS}") == {
        "data_offset": s1 - c1 + s2 - c2, "rollbacks": 2, "lr_scale": 0.25, "losses_seen": STEPS}
    assert (out / "model.weights.safetensors").exists()
    _assert_every_checkpoint_finite(str(out))


@pytest.mark.parametrize("signal_name,after", [("SIGKILL", 1), ("SIGTERM", 2)])
def test_a_run_stopped_after_a_rollback_resumes_to_the_uninterrupted_state(workdir, uninterrupted, signal_name,
                                                                          after):
    """SIGKILL after rollback 1: no checkpoint was written since it, so the rerun starts before the
    event and meets it again. SIGTERM after rollback 2: the checkpoint of the next step carries the
    skipped window, and the rerun skips it without meeting the event."""
    whole, done = uninterrupted
    out = workdir / f"stopped-{signal_name}"
    first = _run([sys.executable, "-c", _SIGNALLED_AFTER_ROLLBACK, str(after)]
                 + _flags(workdir, out, *ROLLBACK, *MIRRORED), env={"SIGNAL_NAME": signal_name})
    assert first.returncode == {"SIGKILL": -9, "SIGTERM": 75}[signal_name], first.stderr[-3000:]
    restored = int(_events(done.stderr)[after - 1][5])
    if signal_name == "SIGTERM":
        assert f"stopped by SIGTERM after step {restored + 1}: checkpoint {out / f'ckpt-{restored + 1}'}" in (
            _last_line(first))
    again = _run([BIN] + _flags(workdir, out, *ROLLBACK, *MIRRORED))
    assert again.returncode == 0, again.stderr[-3000:]
    replayed = len(_events(again.stderr))
    assert replayed == (2 if signal_name == "SIGKILL" else 0), again.stderr[-3000:]
    want = _variables(whole / f"ckpt-{STEPS}")
    _assert_same_variables(_variables(out / f"ckpt-{STEPS}"), want)
    with pytest.raises(AssertionError):  # the comparison sees two steps of difference
        _assert_same_variables(_variables(whole / f"ckpt-{STEPS - 2}"), want)


def test_rollback_gives_up_after_max_rollbacks_in_one_line(workdir, uninterrupted):
    out = workdir / "gives-up"
    done = _run([BIN] + _flags(workdir, out, "--on_nonfinite=rollback", "--loss_spike_window=4",
                                "--max_rollbacks=1"))
    assert done.returncode == 1
    second = _events(uninterrupted[1].stderr)[1]
    spike_step, restored = int(second[3]), int(second[5])
    line = _last_line(done)
    assert re.fullmatch(
        rf"albert-pretrain: Training diverged again: loss 5\.\d+ is above 2 x the median 0\.\d+ of the last 4 "
        rf"steps at step {spike_step}, after 1 rollback\(s\) \(--max_rollbacks=1\)\. Last good checkpoint: "
        rf"{re.escape(str(out / f'ckpt-{restored}'))}\. Lower --learning_rate, check the data near input batch "
        rf"\d+, or allow more rollbacks\.", line), line
    assert len(_events(done.stderr)) == 1
    assert not (out / "model.weights.safetensors").exists()
    _assert_every_checkpoint_finite(str(out))


# ------------------------------------------------------------------ the pieces


def test_loss_guard_spike_rule_and_its_window_round_trip():
    config = RecoveryConfig(on_nonfinite="rollback", loss_spike_window=3, loss_spike_factor=2.0)
    guard = healing.LossGuard(config)
    for step, loss in enumerate([9.0, 4.0, 3.0, 4.0], 1):  # 9.0: the window is not full yet
        guard.check(step, loss)
    guard.check(5, 8.0)  # median of (4, 3, 4) = 4: 8.0 is not above 2 x 4
    with pytest.raises(healing.Divergence, match=r"loss 8\.01 is above 2 x the median 4 of the last 3 steps") as e:
        guard.check(6, 8.01)  # median of (3, 4, 8) = 4
    assert (e.value.step, e.value.loss) == (6, 8.01)
    with pytest.raises(healing.Divergence, match="^loss nan at step 7$"):
        guard.check(7, float("nan"))
    with pytest.raises(healing.Divergence, match="loss inf"):
        guard.check(7, float("inf"))
    healing.LossGuard(RecoveryConfig(loss_spike_factor=0)).check(1, 1e30)  # 0: NaN/inf only

    state = healing.RecoveryState()
    stored = healing.LossGuard(config, state)
    for step, loss in enumerate([1.0, 2.0, 3.0], 1):
        stored.check(step, loss)
    stored.store()
    values = state.recent_losses.numpy()
    np.testing.assert_array_equal(values[-3:], [1.0, 2.0, 3.0])
    assert not values[:-3].any() and int(state.losses_seen.numpy()) == 3
    loaded = healing.LossGuard(config, state)  # a resumed run's guard: the same window
    with pytest.raises(healing.Divergence, match="median 2 of"):
        loaded.check(4, 4.5)
    assert MAX_LOSS_SPIKE_WINDOW == state.recent_losses.shape[0]


@pytest.mark.parametrize("field,value,message", [
    ("on_nonfinite", "retry", "on_nonfinite must be one of ('stop', 'rollback'), got 'retry'."),
    ("loss_spike_window", 1001, "loss_spike_window must be in [1, 1000], got 1001."),
    ("loss_spike_factor", 0.5, "loss_spike_factor must be above 1 (or 0: no spike detection), got 0.5."),
    ("rollback_learning_rate_factor", 2.0, "rollback_learning_rate_factor must be in (0, 1], got 2.0."),
    ("max_rollbacks", -1, "max_rollbacks must be >= 0, got -1."),
])
def test_recovery_settings_are_refused_quoting_the_value(field, value, message):
    with pytest.raises(ValueError) as refused:
        RecoveryConfig(**{field: value}).validate()
    assert str(refused.value) == message
    RecoveryConfig().validate()


def _tiny_state(folder):
    import albert_tf
    from albert_tf.training import OptimizationConfig
    from albert_tf.training.state import TrainState

    return TrainState.create(albert_tf.AlbertConfig.tiny(hidden_size=8, intermediate_size=16, num_attention_heads=2,
                                                         embedding_size=4, num_hidden_layers=1, vocab_size=30),
                             OptimizationConfig(train_batch_size=2, num_train_steps=4, num_warmup_steps=1),
                             "float32", tf.distribute.get_strategy(), str(folder), 3)


def test_no_checkpoint_with_non_finite_weights_is_written(tmp_path):
    from albert_tf.training import TrainingError
    from albert_tf.training.pretraining import _Saver

    state = _tiny_state(tmp_path)
    assert _Saver(state, True, None, None).save(1) == str(tmp_path / "ckpt-1")
    slot = next(v for v in state.optimizer.variables if "adam_v" in v.path)
    slot.assign(np.full(slot.shape, np.inf, np.float32))  # an optimizer slot, not only a weight
    with pytest.raises(TrainingError, match=rf"^The weights are not finite after step 2: no checkpoint written\. "
                                            rf"Last good checkpoint: {re.escape(str(tmp_path / 'ckpt-1'))}\."):
        saver = _Saver(state, True, None, None)
        saver.last = str(tmp_path / "ckpt-1")
        saver.save(2)
    healer = healing.Healer(RecoveryConfig(on_nonfinite="rollback"), state, str(tmp_path))
    with pytest.raises(healing.Divergence, match="non-finite weights at step 2"):
        _Saver(state, True, healer, None).save(2)
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-1")
    assert not glob.glob(str(tmp_path / "ckpt-2*"))


def test_a_checkpoint_written_without_the_recovery_state_is_resumed(tmp_path):
    """Checkpoints of the version before rollback existed hold no recovery/ variables."""
    old = _tiny_state(tmp_path / "old")
    old.global_step.assign(3)
    tf.train.CheckpointManager(old.legacy_checkpoint, str(tmp_path / "old"), 1, checkpoint_name="ckpt").save(3)
    assert not any(n.startswith("recovery/") for n, _ in tf.train.list_variables(str(tmp_path / "old" / "ckpt-3")))
    new = _tiny_state(tmp_path / "new")
    new.recovery.data_offset.assign(7)
    new.restore(str(tmp_path / "old" / "ckpt-3"))
    assert new.step == 3 and int(new.recovery.data_offset.numpy()) == 7  # left as it was: nothing to read
    new.manager.save(checkpoint_number=3)
    again = _tiny_state(tmp_path / "again")
    again.restore(new.manager.latest_checkpoint)
    assert int(again.recovery.data_offset.numpy()) == 7  # now carried
