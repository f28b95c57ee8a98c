"""The custom pretraining loop: exact big-batch accumulation, resume after a
kill, mirrored and multi-worker runs, logs/summaries/eval output, bad input."""

import concurrent.futures
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf import optimization, training

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

WORKER = os.path.join(HERE, "training_worker.py")
REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain_data")
    tl.write_tfrecords(str(root / "a.tfrecord"), 48, seed=1)
    tl.write_tfrecords(str(root / "b.tfrecord"), 48, seed=2)
    return str(root / "*.tfrecord")


def _run(data, output_dir, **kwargs):
    args = dict(train_batch_size=8, num_train_steps=3, num_warmup_steps=1,
                learning_rate=0.01, save_checkpoints_steps=10, log_steps=1,
                max_seq_length=tl.SEQ, max_predictions_per_seq=tl.PREDS,
                seed=7)
    args.update(kwargs)
    config = args.pop("config", tl.tiny_config())
    return training.run_pretraining(
        config, tl.make_dataset_fn(data, args["train_batch_size"]),
        str(output_dir), **tl.pretraining_kwargs(**args))


def _weights(model):
    return {v.path: v.numpy() for v in model.weights}


def _reference_big_batch(data, steps, batch, seed=7):
    """Plain GradientTape training on whole batches with the original loss."""
    keras.utils.set_random_seed(seed)
    model = albert_tf.AlbertPretrainer(tl.tiny_config())
    schedule = optimization.WarmupPolynomialDecay(0.01, steps, 1)
    opt = optimization.Lamb(schedule, global_clipnorm=1.0)
    ds = tl.make_dataset_fn(data, batch)(tf.distribute.InputContext())
    for batch_values in ds.take(steps):
        with tf.GradientTape() as tape:
            out = model(batch_values, training=True)
            loss = albert_tf.pretraining_losses(
                albert_tf.pretraining_loss_terms(batch_values, out))["loss"]
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return _weights(model)


def _assert_weights_close(got, want, rtol=1e-4, atol=1e-5):
    """Defaults for runs whose sums are ordered differently: Adam without bias
    correction maps a near-zero gradient entry g to about g / (|g| + 1e-6), so
    float32 summation order moves such entries by up to ~1e-3 of one step
    (lr 0.01 here); 1e-5 is 1e-3 of the 3-step travel."""
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol,
                                   err_msg=key)


def test_accumulation_equals_one_big_batch(data, tmp_path):
    want = _reference_big_batch(data, steps=3, batch=8)
    one = _run(data, tmp_path / "one")
    four = _run(data, tmp_path / "four", gradient_accumulation_steps=4)
    _assert_weights_close(_weights(one["model"]), want)
    _assert_weights_close(_weights(four["model"]), want)
    # The comparison is between trained weights, not two initial states.
    keras.utils.set_random_seed(7)
    init = _weights(albert_tf.AlbertPretrainer(tl.tiny_config()))
    moved = [k for k in want if np.max(np.abs(want[k] - init[k])) > 1e-3]
    assert len(moved) > len(want) // 2, moved


def test_outputs_logs_summaries_and_eval_results(data, tmp_path):
    logged = []
    spm = tmp_path / "vocab.model"
    spm.write_bytes(b"not a real model, copied verbatim")
    result = _run(data, tmp_path / "run", num_train_steps=4,
                  save_checkpoints_steps=2, keep_checkpoint_max=1,
                  spm_model_file=str(spm), log_callback=logged.append,
                  eval_dataset_fn=tl.make_dataset_fn(data, 8, repeat=False),
                  max_eval_steps=3)
    out = tmp_path / "run"
    assert [m["step"] for m in logged] == [1, 2, 3, 4]
    for key in ("loss", "mlm_accuracy", "sop_accuracy", "learning_rate",
                "examples_per_second", "eta_seconds"):
        assert np.isfinite(logged[-1][key]), key
    # Schedule: warmup 1 step, then linear decay over 4 steps (lr of step 4
    # is schedule(3) = 0.01 * (1 - 3/4)).
    np.testing.assert_allclose(logged[-1]["learning_rate"], 0.0025, rtol=1e-5)
    assert result["global_step"] == 4
    assert sorted(p.name for p in out.glob("ckpt-*.index")) == ["ckpt-4.index"]
    assert (out / "spm.model").read_bytes() == spm.read_bytes()
    assert albert_tf.AlbertConfig.from_json_file(
        str(out / "albert_config.json")) == tl.tiny_config()
    lines = (out / "eval_results.txt").read_text().splitlines()
    keys = [line.split(" = ")[0] for line in lines]
    for key in ("global_step", "masked_lm_accuracy", "masked_lm_loss",
                "sentence_order_accuracy", "sentence_order_loss"):
        assert key in keys
    assert "global_step = 4" in lines
    assert 24 == result["eval_num_examples"]  # 3 batches of 8
    # TensorBoard scalars (scalars plugin) for every logged step.
    tags = {}
    for path in (out / "train").glob("events.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    assert tags["loss"] == [1, 2, 3, 4]
    assert "mlm_accuracy" in tags and "learning_rate" in tags
    # The training checkpoint and the exported weights load back.
    loaded = albert_tf.load_checkpoint(str(out / "ckpt-4"))
    _assert_weights_close(_weights(loaded), _weights(result["model"]),
                          rtol=0, atol=0)
    # Evaluating the checkpoint later (albert-pretrain --nodo_train --do_eval)
    # gives the numbers of the in-run evaluation.
    (out / "eval_results.txt").unlink()
    again = training.run_evaluation(
        tl.tiny_config(), tl.make_dataset_fn(data, 8, repeat=False), str(out),
        max_eval_steps=3)
    assert again["global_step"] == 4
    for key in ("masked_lm_accuracy", "masked_lm_loss",
                "sentence_order_accuracy", "sentence_order_loss"):
        np.testing.assert_allclose(again[key], result[f"eval_{key}"],
                                   rtol=1e-6, err_msg=key)
    assert "global_step = 4" in (out / "eval_results.txt").read_text()


def test_time_budget_then_warm_start_from_init_checkpoint(data, tmp_path):
    # A zero time budget stops after one step, with a checkpoint.
    first = _run(data, tmp_path / "first", num_train_steps=50,
                 max_train_seconds=0)
    assert first["global_step"] == 1
    assert first["checkpoint"].endswith("ckpt-1")
    # The final weights record their step (issue 36 F5: load_checkpoint compares it with a continued run's).
    from albert_tf import model_folder

    assert model_folder.recorded_step(str(tmp_path / "first" / "model.weights.safetensors")) == 1
    second = _run(data, tmp_path / "second", num_train_steps=1,
                  learning_rate=0.0, seed=99,
                  init_checkpoint=str(tmp_path / "first"))
    # lr 0: the warm-started weights are exactly the source's.
    _assert_weights_close(_weights(second["model"]), _weights(first["model"]),
                          rtol=0, atol=0)


def test_bad_inputs_give_clear_errors(data, tmp_path):
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    with pytest.raises(training.TrainingError, match="yielded no batch"):
        _run(str(empty), tmp_path / "a")
    # Shards written with length 16, read as 12: the reader's parse fails.
    with pytest.raises(training.TrainingError, match="max_seq_length=12"):
        training.run_pretraining(
            tl.tiny_config(), tl.make_dataset_fn(data, 8, seq_length=12),
            str(tmp_path / "b"), **tl.pretraining_kwargs(
                train_batch_size=8, num_train_steps=2, max_seq_length=12,
                max_predictions_per_seq=tl.PREDS))
    # A reader that yields the wrong length is caught before training.
    with pytest.raises(training.TrainingError, match=r"'input_ids'.*\[batch, 12\]"):
        training.run_pretraining(
            tl.tiny_config(), tl.make_dataset_fn(data, 8),
            str(tmp_path / "b2"), **tl.pretraining_kwargs(
                train_batch_size=8, num_train_steps=2, max_seq_length=12,
                max_predictions_per_seq=tl.PREDS))
    with pytest.raises(ValueError, match="max_position_embeddings=16"):
        _run(data, tmp_path / "b3", max_seq_length=32)
    with pytest.raises(ValueError, match="train_batch_size=6"):
        _run(data, tmp_path / "c", train_batch_size=6,
             gradient_accumulation_steps=4)
    _run(data, tmp_path / "d", num_train_steps=1)
    with pytest.raises(training.TrainingError, match="hidden_size: 16 there"):
        _run(data, tmp_path / "d", config=tl.tiny_config(hidden_size=32))


def test_nan_loss_names_step_and_last_good_checkpoint(data, tmp_path):
    clean = tl.make_dataset_fn(data, 8)

    def poisoned(ctx):
        def poison(index, batch):
            bad = tf.cast(index >= 3, tf.float32) * np.nan
            batch = dict(batch)
            batch["masked_lm_weights"] = batch["masked_lm_weights"] + tf.where(
                index >= 3, bad, 0.0)
            return batch
        return clean(ctx).enumerate().map(poison)

    with pytest.raises(training.TrainingError) as info:
        training.run_pretraining(
            tl.tiny_config(), poisoned, str(tmp_path / "nan"),
            **tl.pretraining_kwargs(
                train_batch_size=8, num_train_steps=6, num_warmup_steps=1,
                save_checkpoints_steps=2, log_steps=1))
    message = str(info.value)
    assert "at step 4" in message and "ckpt-2" in message, message


def test_resume_with_other_settings_is_refused(data, tmp_path, caplog):
    out = tmp_path / "run"
    _run(data, out, num_train_steps=2, save_checkpoints_steps=1)
    recorded = json.loads((out / training.RUN_SETTINGS_FILENAME).read_text())
    assert recorded == dict(train_batch_size=8, num_replicas=1,
                            gradient_accumulation_steps=1,
                            max_seq_length=tl.SEQ,
                            max_predictions_per_seq=tl.PREDS,
                            num_train_steps=2, seed=recorded["seed"], masking="static",
                            masked_lm_prob=None,  # counts only under dynamic masking
                            input_files=None)  # the library's own dataset_fn: no --input_file to record
    changes = [dict(train_batch_size=16), dict(gradient_accumulation_steps=2),
               dict(max_predictions_per_seq=2)]
    for change in changes:
        (name, new), = change.items()
        with pytest.raises(training.TrainingError) as info:
            _run(data, out, num_train_steps=4, **change)
        message = str(info.value)
        for part in (f"{name}={new}", f"{name}={recorded[name]}",
                     f"--{name}={recorded[name]}", "ckpt-2", "--output_dir"):
            assert part in message, message
    # Training longer stays allowed; the log says the schedule changed.
    with caplog.at_level("WARNING"):
        longer = _run(data, out, num_train_steps=3)
    assert longer["global_step"] == 3
    assert "num_train_steps 2 -> 3" in caplog.text
    assert json.loads((out / training.RUN_SETTINGS_FILENAME).read_text())[
        "num_train_steps"] == 3


def test_resume_on_other_replica_count_is_refused(tmp_path):
    """The replica count (not changeable in one process) through the same check."""
    from albert_tf.training import state

    settings = state.run_settings(
        training.OptimizationConfig(train_batch_size=8, num_train_steps=4),
        num_replicas=2, max_seq_length=None, max_predictions_per_seq=3)
    state.check_run_settings(str(tmp_path), settings, None, chief=True)
    with pytest.raises(training.TrainingError) as info:
        state.check_run_settings(str(tmp_path), dict(settings, num_replicas=1),
                                 "run/ckpt-2", chief=True)
    message = str(info.value)
    for part in ("num_replicas=1", "num_replicas=2", "2 replica(s)",
                 "--strategy", "run/ckpt-2"):
        assert part in message, message
    # An unknown length (None) on either side is not a mismatch.
    state.check_run_settings(str(tmp_path), dict(settings, max_seq_length=16),
                             "run/ckpt-2", chief=False)


def test_run_evaluation_evaluates_the_named_checkpoint(data, tmp_path):
    one = _run(data, tmp_path / "one", num_train_steps=1)
    two = _run(data, tmp_path / "two", num_train_steps=2)
    eval_fn = tl.make_dataset_fn(data, 8, repeat=False)
    keys = ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
            "sentence_order_loss", "loss")
    want = {1: training.evaluate(one["model"], eval_fn, max_eval_steps=2),
            2: training.evaluate(two["model"], eval_fn, max_eval_steps=2)}
    assert want[1]["masked_lm_loss"] != want[2]["masked_lm_loss"]
    # output_dir holds ckpt-2, but the caller named the one-step checkpoint
    # (as a prefix, then as its folder): that one is evaluated.
    for named in (one["checkpoint"], str(tmp_path / "one")):
        got = training.run_evaluation(
            tl.tiny_config(), eval_fn, str(tmp_path / "two"),
            checkpoint=named, max_eval_steps=2)
        assert got["global_step"] == 1, named
        for key in keys:
            np.testing.assert_allclose(got[key], want[1][key], rtol=1e-6,
                                       err_msg=key)
    # Without a named checkpoint, output_dir's latest.
    own = training.run_evaluation(tl.tiny_config(), eval_fn,
                                  str(tmp_path / "two"), max_eval_steps=2)
    assert own["global_step"] == 2
    np.testing.assert_allclose(own["loss"], want[2]["loss"], rtol=1e-6)


def _python():
    return [sys.executable, WORKER]


def _worker(args, env=None, check=True, timeout=240):
    proc = subprocess.run(_python() + [json.dumps(args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"worker failed ({proc.returncode}):\n"
                             f"{proc.stderr[-4000:]}")
    return proc


def _checkpoint_values(prefix):
    return {name: tf.train.load_variable(prefix, name)
            for name, _ in tf.train.list_variables(prefix)
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not name.startswith("input/")}


def test_killed_mirrored_run_resumes_exactly(data, tmp_path):
    # Mirrored on 2 logical CPUs: one input pipeline feeds both replicas, so
    # a step consumes two of its elements; the resumed run restores the input
    # position that ckpt-2 saved (it is not skipped: train_input), and element
    # j of a step still goes to replica j. (One device: tests/contracts/test_pretrain_resume.py,
    # through the installed binaries.) The straight and the killed run are
    # independent: they run at once.
    base = dict(data=data, batch=8, steps=6, save_steps=2, dropout=0.1,
                strategy="mirrored", logical_cpus=2)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        straight = pool.submit(_worker, dict(base, output_dir=str(tmp_path / "straight")))
        killed = pool.submit(_worker, dict(base, output_dir=str(tmp_path / "resumed"), die_after_step=3),
                             check=False).result()
        straight.result()
    assert killed.returncode != 0  # SIGKILL after the step-2 checkpoint
    assert tf.train.latest_checkpoint(str(tmp_path / "resumed")).endswith(
        "ckpt-2")
    resumed = _worker(dict(base, output_dir=str(tmp_path / "resumed")))
    assert "Resumed from step 2" in resumed.stderr
    assert "Input position restored from" in resumed.stderr and "reading again" not in resumed.stderr
    want = _checkpoint_values(str(tmp_path / "straight" / "ckpt-6"))
    got = _checkpoint_values(str(tmp_path / "resumed" / "ckpt-6"))
    assert set(got) == set(want)
    # Model, optimizer slots and iterations, global step: all of them.
    assert any(k.startswith("optimizer/_variables/") for k in want)
    assert "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE" in want
    assert "global_step/.ATTRIBUTES/VARIABLE_VALUE" in want
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def test_mirrored_two_cpu_replicas_equal_one_device(data, tmp_path):
    dump = str(tmp_path / "mirrored.npz")
    _worker(dict(data=data, batch=8, steps=3, accum=2, strategy="mirrored",
                 logical_cpus=2, output_dir=str(tmp_path / "m"), dump=dump,
                 warmup=1))
    got = dict(np.load(dump))
    assert int(got.pop("replicas")) == 2  # copies compared in the worker
    _assert_weights_close(got, _reference_big_batch(data, steps=3, batch=8))


def test_multi_worker_mirrored_two_processes(data, tmp_path):
    ports = tl.free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        # A time budget that never ends still runs the workers' agreement
        # on stopping (a collective) at every logged step.
        args = dict(data=data, batch=8, steps=3, strategy="multi_worker_mirrored",
                    output_dir=str(tmp_path / "mw"), warmup=1,
                    max_train_seconds=1e6,
                    dump=str(tmp_path / f"worker{index}.npz"))
        procs.append(subprocess.Popen(
            _python() + [json.dumps(args)], cwd=REPO, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-4000:]
    w0 = dict(np.load(tmp_path / "worker0.npz"))
    w1 = dict(np.load(tmp_path / "worker1.npz"))
    for key in w0:
        np.testing.assert_array_equal(w0[key], w1[key], err_msg=key)
    w0.pop("replicas")
    _assert_weights_close(w0, _reference_big_batch(data, steps=3, batch=8))
    # Only the chief wrote to output_dir; the other worker's scratch is gone.
    names = sorted(os.listdir(tmp_path / "mw"))
    assert "ckpt-3.index" in names and not [n for n in names
                                            if n.startswith(".worker")]


# Randomised weights for the precision test: logits of order 1, so 3 updates at
# learning rate 0.01 move the loss by about 1 (at initializer_range 0.02 the
# loss sits at ln(100) + ln(2) and a run with learning rate 0 is 0.02 away).
_PRECISION_RUN = dict(config=tl.tiny_config(initializer_range=0.5), num_train_steps=4,
                      gradient_accumulation_steps=2)


def _losses_and_weights(data, output_dir, **kwargs):
    logged = []
    result = _run(data, output_dir, log_callback=logged.append, **_PRECISION_RUN, **kwargs)
    return np.array([m["loss"] for m in logged]), _weights(result["model"]), result


@pytest.fixture(scope="module")
def float32_runs(data, tmp_path_factory):
    """The float32 run the mixed ones follow, and the same run at learning rate 0 (its initial weights)."""
    root = tmp_path_factory.mktemp("float32_runs")
    return {name: _losses_and_weights(data, root / name, **kwargs)[:2]
            for name, kwargs in (("f32", {}), ("lr0", dict(learning_rate=0.0)))}


def _distances(run, reference, initial):
    """Largest loss difference over the reference losses' range; the weight update's relative error."""
    losses, weights = run
    ref_losses, ref_weights = reference
    update = np.concatenate([(weights[k] - initial[k]).ravel() for k in initial])
    ref_update = np.concatenate([(ref_weights[k] - initial[k]).ravel() for k in initial])
    return (float(np.abs(losses - ref_losses).max() / np.ptp(ref_losses)),
            float(np.linalg.norm(update - ref_update) / np.linalg.norm(ref_update)))


@pytest.mark.parametrize("precision,jit", [("bfloat16", True),
                                           ("float16", False)])
def test_mixed_precision_and_xla_follow_float32(data, tmp_path, float32_runs, precision, jit):
    """Mixed-precision training follows float32 training, within bounds set by the effect of training itself.

    Bounds: every step's loss within 5% of the float32 run's loss range (1.4 here), and the weights' total
    update within 20% of float32's (relative L2). Measured: bfloat16 with XLA 0.8% and 6%, float16 0.2% and
    2% (bfloat16 rounds at 2**-8, 8 times float16's 2**-11). A run that does not train (learning rate 0) is
    86% and 100% away, and the float32 losses one step late are 65% away: both fail the same bounds.
    """
    loss_bound, update_bound = 0.05, 0.2
    losses, weights, result = _losses_and_weights(data, tmp_path / "mixed", mixed_precision=precision,
                                                  jit_compile=jit)
    initial = float32_runs["lr0"][1]
    assert np.ptp(float32_runs["f32"][0]) > 1.0, float32_runs["f32"][0]  # training moves the loss by order 1
    loss_error, update_error = _distances((losses, weights), float32_runs["f32"], initial)
    assert loss_error < loss_bound and update_error < update_bound, (loss_error, update_error)
    # Companions: learning rate 0, and the float32 losses shifted by one step, fail the same bounds.
    still_error = _distances(float32_runs["lr0"], float32_runs["f32"], initial)
    assert still_error[0] > 4 * loss_bound and still_error[1] > 4 * update_bound, still_error
    shifted = np.roll(float32_runs["f32"][0], 1)
    assert np.abs(shifted - float32_runs["f32"][0]).max() / np.ptp(float32_runs["f32"][0]) > 4 * loss_bound
    assert all(v.dtype == "float32" for v in result["model"].weights)
    names = [n for n, _ in tf.train.list_variables(result["checkpoint"])]
    assert any(n.startswith("loss_scale") for n in names) == (
        precision == "float16")


def test_dynamic_loss_scale_halves_on_overflow_and_grows_when_stable():
    scale = training.LossScale.create(initial=8.0)
    scale.period = 2
    history = []
    for finite in (True, True, False, True, False, False):
        scale.update(tf.constant(finite))
        history.append((float(scale.scale.numpy()),
                        int(scale.good_steps.numpy())))
    assert history == [(8.0, 1), (16.0, 0), (8.0, 0), (8.0, 1), (4.0, 0),
                       (2.0, 0)]
