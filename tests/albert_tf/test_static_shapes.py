"""Static shapes (--static_shapes, on by itself under --strategy=tpu): what a TPU needs, checked on a CPU.

For every fine-tuning head: one training pass holds batches of exactly the batch size, each of a
length from the fixed set (8, 16, 24, 32), so the pass meets at most four shapes (the dynamic pass,
the companion, fails that check); evaluation pads the last batch with rows whose outputs are dropped,
and its outputs and metrics equal those of the dynamic-shape evaluation (a companion with the rows
shifted by one fails). Through albert-finetune: every batch the encoder sees, in training,
evaluation and prediction, has a fixed shape, and the evaluation and prediction files equal those of a
dynamic-shape rerun.
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.tasks import FinetuneOptions, get_task, runner, static_shapes
from tests.albert_tf import finetune_heads as fh
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

LENGTHS = static_shapes.static_lengths(fh.MAX_SEQ_LENGTH, fh.LENGTH_STEP)
# Outputs of the same weights at another padded length and batch: float32 sums in another order (a few
# 1e-7 of logits of size ~1-10 at initializer_range 0.5). Rows shifted by one differ by 1e-1 or more.
RTOL, ATOL = 1e-5, 1e-5


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("spm")))


def _head(name, spm, folder, **changes):
    """(task, train split, dev split, model with weights spread enough that no two outputs tie, options)."""
    head = fh.HEADS[name]
    data_dir = head.make_data(os.path.join(folder, "data"))
    options = fh.task_options(head, spm, static_shapes=True, **changes)
    task = get_task(head.task, options)
    train, dev = task.read(data_dir, "train"), task.read(data_dir, "dev")
    keras.utils.set_random_seed(3)
    model = task.build_model(tiny_config(initializer_range=0.5), None, train)
    run = FinetuneOptions(head.task, data_dir, os.path.join(folder, "out"), task_options=options,
                          train_batch_size=fh.BATCH, eval_batch_size=fh.BATCH, seed=1)
    return task, train, dev, model, run


def _shapes(dataset, count):
    """The shape of every feature of x in the first `count` elements (one tuple per element)."""
    return [tuple(tuple(v.shape) for v in tf.nest.flatten(x)) for x, *_ in dataset.take(count)]


def _assert_fixed(shapes, batch):
    """Every batch has `batch` rows and a length of LENGTHS; at most len(LENGTHS) shapes in all."""
    for element in shapes:
        for shape in element:
            assert shape[0] == batch and shape[-1] in LENGTHS, (shape, LENGTHS)
    assert len(set(shapes)) <= len(LENGTHS), sorted(set(shapes))


def _assert_same_outputs(got, want):
    for a, b in zip(tf.nest.flatten(got), tf.nest.flatten(want)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=RTOL, atol=ATOL)


def _assert_same_results(got, want):
    assert set(got) == set(want)
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=RTOL, abs=ATOL), key


@pytest.mark.parametrize("name", list(fh.HEADS))
def test_an_epoch_has_fixed_shapes_and_evaluation_equals_the_dynamic_run(name, spm, tmp_path, monkeypatch):
    task, train, dev, model, run = _head(name, spm, str(tmp_path))
    items = task.num_train_items(train)
    per_pass = task.batches_per_pass(train, fh.BATCH)
    assert items % fh.BATCH and per_pass == items // fh.BATCH  # a remainder to drop
    static = _shapes(runner.training_batches(task, model, train, run), per_pass)
    _assert_fixed(static, fh.BATCH)
    # One pass uses every item at most once (the remainder sits out).
    chosen = np.concatenate(task.pass_batches(train, items, fh.BATCH, run.seed, 0))
    assert len(chosen) == per_pass * fh.BATCH == len(set(chosen.tolist()))

    # The companion: the dynamic pass (ids made the same way) has other shapes and fails the check.
    run.task_options.static_shapes = False
    dynamic_batches = static_shapes.model_input_batches(runner.training_batches(task, model, train, run), model)
    dynamic = _shapes(dynamic_batches, task.batches_per_pass(train, fh.BATCH))
    with pytest.raises(AssertionError):
        _assert_fixed(dynamic, fh.BATCH)

    # Evaluation: the outputs each evaluation predicted, the metrics, the padded batches.
    module = sys.modules[type(task).__module__]
    original, calls = module.predict_in_batches, []

    def recording(model, inputs, batch_size, options=None):
        outputs = original(model, inputs, batch_size, options)
        calls.append((inputs, outputs))
        return outputs

    monkeypatch.setattr(module, "predict_in_batches", recording)
    dynamic_results = task.evaluate(model, dev, fh.BATCH)
    run.task_options.static_shapes = True
    static_results = task.evaluate(model, dev, fh.BATCH)
    (inputs, dynamic_outputs), (_, outputs) = calls
    rows = static_shapes.num_rows(inputs)
    shapes = _shapes(static_shapes.prediction_dataset(model, inputs, fh.BATCH, LENGTHS), 1000)
    assert rows % fh.BATCH and len(shapes) == -(-rows // fh.BATCH)  # the last batch was padded
    _assert_fixed(shapes, fh.BATCH)
    assert all(np.shape(leaf)[0] == rows for leaf in tf.nest.flatten(outputs))  # padding rows dropped
    _assert_same_outputs(outputs, dynamic_outputs)
    with pytest.raises(AssertionError):  # the companion: each row's outputs given to its neighbour
        _assert_same_outputs(outputs, tf.nest.map_structure(lambda v: np.roll(v, 1, axis=0), dynamic_outputs))
    _assert_same_results(static_results, dynamic_results)


def test_static_lengths_and_bucket_length():
    assert static_shapes.static_lengths(32, 8) == (8, 16, 24, 32)
    assert static_shapes.static_lengths(30, 8) == (8, 16, 24, 30)
    lengths = (8, 16, 24, 30)
    got = [int(static_shapes.bucket_length(tf.constant(n), lengths)) for n in range(1, 31)]
    assert got == [8] * 8 + [16] * 8 + [24] * 8 + [30] * 6
    with pytest.raises(ValueError, match="--static_length_step must be positive, got 0"):
        static_shapes.static_lengths(32, 0)


def test_static_shapes_refuse_batches_that_cannot_be_fixed(spm, tmp_path):
    task, train, _, _, run = _head("classifier_single", spm, str(tmp_path))
    run.train_batch_size = 15  # more than the 14 training items
    with pytest.raises(ValueError, match="the 14 training items make no full batch of --train_batch_size=15"):
        runner._check_static_batches(task, run, 1, train)
    run.train_batch_size, run.eval_batch_size = 4, 6
    with pytest.raises(ValueError, match="--eval_batch_size=6 is not a multiple of the 4 replicas"):
        runner._check_static_batches(task, run, 4, train)
    runner._check_static_batches(task, run, 2, train)
