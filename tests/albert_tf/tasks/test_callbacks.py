"""Fine-tuning callbacks on a tiny Keras model: progress, summaries, resume, best-on-dev."""

import glob
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import logging

from albert_tf.tasks import callbacks as cb


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    return model


def _data():
    x = np.arange(24, dtype=np.float32).reshape(8, 3) / 24.0
    return x, x.sum(axis=1, keepdims=True)


def test_format_duration():
    assert cb.format_duration(0) == "0:00"
    assert cb.format_duration(59.6) == "1:00"
    assert cb.format_duration(3600 * 2 + 61) == "2:01:01"


def test_progress_line_has_step_rate_and_eta(monkeypatch):
    lines = []
    monkeypatch.setattr(logging, "info", lambda fmt, *args: lines.append(fmt % args))
    model = _model()
    x, y = _data()
    model.fit(x, y, batch_size=2, epochs=1, verbose=0,
              callbacks=[cb.ProgressLogger(total_steps=4, batch_size=2, log_steps=2)])
    progress = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == ["2/4", "4/4"]
    assert "steps/s" in progress[0] and "examples/s" in progress[0] and "ETA" in progress[0]
    assert "loss" in progress[0]


def test_scalar_summaries_are_tensorboard_events(tmp_path):
    model = _model()
    x, y = _data()
    summaries = cb.ScalarSummaries(str(tmp_path), log_steps=2)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[summaries])
    summaries.write_eval({"accuracy": 0.5})
    tags = {}
    for path in glob.glob(str(tmp_path / "train" / "events*")) + glob.glob(str(tmp_path / "eval" / "events*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
                assert value.metadata.plugin_data.plugin_name == "scalars"
    assert tags["loss"] == [2, 4] and tags["learning_rate"] == [2, 4]
    assert tags["accuracy"] == [4]


def _dropout_model(seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dropout(0.5),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    return model


def test_resume_restores_weights_optimizer_seeds_and_data_position(tmp_path):
    x, y = _data()
    first = _dropout_model(seed=0)
    resume = cb.ResumeCheckpoint(str(tmp_path), first, batches_per_pass=3, save_steps=2)
    assert resume.restore() == 0
    # 2 epochs of 4 batches: saved at batches 2 and 6 (every 2) and 4 and 8 (epoch ends).
    first.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[resume])
    kept = sorted(glob.glob(str(tmp_path / "resume" / "ckpt-*.index")))
    # max_to_keep=2: the latest and the one before (the fallback when the latest is corrupt).
    assert [os.path.basename(p) for p in kept] == ["ckpt-6.index", "ckpt-8.index"]
    second = _dropout_model(seed=1)
    again = cb.ResumeCheckpoint(str(tmp_path), second, batches_per_pass=3)
    assert again.restore() == 8
    # 8 batches of 3 a pass: pass 2, batch 2 next.
    assert (int(again.data_pass.numpy()), int(again.pass_batch.numpy()), int(again.epoch.numpy())) == (2, 2, 2)
    assert int(second.optimizer.iterations.numpy()) == 8
    for a, b in zip(first.variables, second.variables):  # weights and the dropout seed state
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(cb.seed_states(second)) == 1
    for a, b in zip(first.optimizer.variables, second.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # A different pass length means other training data: refused.
    with pytest.raises(ValueError, match="pass 2 batch 2 does not match 8 batches of 5 a pass"):
        cb.ResumeCheckpoint(str(tmp_path), _dropout_model(), batches_per_pass=5).restore()


def _span_qa(seed=0):
    """A tiny compiled AlbertSpanQA: its loss never reads the pooler, whose weights get no gradient."""
    from albert_tf import optimizers
    from albert_tf.models import AlbertSpanQA
    from tests.albert_tf.task_testlib import tiny_config

    keras.utils.set_random_seed(seed)
    model = AlbertSpanQA(tiny_config())
    model.compile(optimizer=optimizers.adamw(0.1, num_train_steps=10, weight_decay_rate=0.5))
    return model


def _span_data(n=8, length=12):
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 100, size=(n, length)).astype(np.int32)
    x = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    y = {"start_positions": rng.integers(1, length, n).astype(np.int32),
         "end_positions": rng.integers(1, length, n).astype(np.int32)}
    return x, y


def _pooler(model):
    return [v for v in model.trainable_variables if "pooler" in v.path]


def test_build_optimizer_tracks_every_trainable_variable_and_fit_keeps_the_slots_without_a_gradient():
    x, y = _span_data()
    model = _span_qa()
    cb.build_optimizer(model)
    built = [id(v) for v in model.optimizer.variables]
    assert len(model.optimizer._trainable_variables) == len(model.trainable_variables)
    pooler_before = [np.asarray(v) for v in _pooler(model)]
    assert len(pooler_before) == 2
    others_before = [np.asarray(v) for v in model.trainable_variables if "pooler" not in v.path]
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert int(model.optimizer.iterations.numpy()) == 2
    assert [id(v) for v in model.optimizer.variables] == built  # applied without rebuilding
    # No gradient: the pooler (weight decay included) and its Adam m and v are untouched.
    for before, v in zip(pooler_before, _pooler(model)):
        np.testing.assert_array_equal(np.asarray(v), before)
    slots = [np.asarray(v) for v in model.optimizer.variables if "pooler" in v.path]
    assert len(slots) == 4 and all(not s.any() for s in slots)
    # Everything else trained (the checks above would also pass on a model that trained nothing).
    others = [np.asarray(v) for v in model.trainable_variables if "pooler" not in v.path]
    assert all(not np.array_equal(a, b) for a, b in zip(others, others_before))
    cb.build_optimizer(model)  # a second call changes nothing
    assert [id(v) for v in model.optimizer.variables] == built


def test_lazy_build_leaves_out_the_pooler_which_a_resume_build_includes():
    # The cause of issue 29's crash: left unbuilt, the first step builds the optimizer on the
    # variables with a gradient; a resume builds it on every trainable variable, so the slots
    # after the pooler's would restore into other variables.
    x, y = _span_data()
    model = _span_qa()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert len(model.optimizer._trainable_variables) == len(model.trainable_variables) - 2


def test_resume_of_a_span_qa_model_restores_every_slot(tmp_path):
    x, y = _span_data()
    first = _span_qa(seed=0)
    cb.build_optimizer(first)
    resume = cb.ResumeCheckpoint(str(tmp_path), first, batches_per_pass=2)
    first.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[resume])
    second = _span_qa(seed=1)
    cb.build_optimizer(second)
    assert cb.ResumeCheckpoint(str(tmp_path), second, batches_per_pass=2).restore() == 2
    assert len(second.optimizer.variables) == len(first.optimizer.variables)
    for a, b in zip(first.optimizer.variables, second.optimizer.variables):
        assert a.path.split("/", 1)[1] == b.path.split("/", 1)[1]  # the same slot of the same variable
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)


def test_build_optimizer_refuses_an_unbuilt_model():
    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="model 'sequential.*' is not built"):
        cb.build_optimizer(model)


def test_resume_saves_every_save_steps_but_not_at_an_epoch_end(tmp_path):
    x, y = _data()
    model = _dropout_model()
    saved = []
    resume = cb.ResumeCheckpoint(str(tmp_path), model, batches_per_pass=4, save_steps=3)
    resume._save = lambda: saved.append(resume._done)
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[resume])
    # Batches 3 and 6 by save_steps, 4 and 8 at the epoch ends (on_epoch_end).
    assert saved == [3, 4, 6, 8]
    saved.clear()
    resume2 = cb.ResumeCheckpoint(str(tmp_path / "b"), _dropout_model(), batches_per_pass=4, save_steps=2)
    resume2._save = lambda: saved.append(resume2._done)
    _dropout_model().fit(x, y, batch_size=2, epochs=1, verbose=0, callbacks=[resume2])
    assert saved == [2, 4]  # batch 4 ends the epoch: saved once, after it


def test_best_on_dev_saves_only_improvements_and_survives_restarts(tmp_path):
    scores = iter([0.5, 0.4, 0.7])
    saved = []
    model = _model()
    best = cb.BestOnDev(lambda m: {"accuracy": next(scores)}, "accuracy",
                        lambda m: saved.append(True), str(tmp_path))
    best.set_model(model)
    for epoch in range(3):
        best.on_epoch_end(epoch)
    assert len(saved) == 2  # epochs 1 and 3
    with open(tmp_path / cb.BEST_STATE_FILE) as f:
        assert json.load(f) == {"accuracy": 0.7, "epoch": 3}
    restarted = cb.BestOnDev(lambda m: {"accuracy": 0.6}, "accuracy", lambda m: saved.append(True),
                             str(tmp_path))
    restarted.set_model(model)
    restarted.on_epoch_end(3)
    assert len(saved) == 2  # 0.6 < 0.7 remembered from the file
