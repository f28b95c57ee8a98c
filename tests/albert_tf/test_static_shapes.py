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


# ------------------------------------------------------------------ pretraining
def _pretraining_data(folder, rows=11):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import training_testlib as tl

    path = tl.write_tfrecords(os.path.join(folder, "eval.tfrecord"), rows, seed=4)
    return tl, path


def _pretraining_fn(path, tl, batch, static, is_training=False):
    import pipelines

    return lambda ctx: pipelines.pretraining_dataset(
        path, ctx.get_per_replica_batch_size(batch), tl.SEQ, tl.PREDS, is_training=is_training, seed=1,
        input_context=ctx, static_shapes=static)


def _assert_fixed_pretraining(shapes, batch):
    for element in shapes:
        assert all(shape[0] == batch for shape in element), element
    assert len(set(shapes)) == 1, sorted(set(shapes))


def test_pretraining_batches_are_fixed_and_static_evaluation_equals_the_dynamic_one(tmp_path):
    from albert_tf import AlbertPretrainer, training

    tl, path = _pretraining_data(str(tmp_path))  # 11 records: batches of 4 leave 3
    one = tf.distribute.InputContext(1, 0, 1)
    train = _pretraining_fn(path, tl, 4, static=True, is_training=True)(one)
    _assert_fixed_pretraining(_shapes(train.map(lambda b: (b,)), 2 * 11 // 4 + 1), 4)  # a bit over two epochs
    static = list(_pretraining_fn(path, tl, 4, static=True)(one))
    assert [float(np.sum(b["is_real_example"])) for b in static] == [4.0, 4.0, 3.0]
    _assert_fixed_pretraining([tuple(tuple(v.shape) for v in b.values()) for b in static], 4)
    dynamic = _shapes(_pretraining_fn(path, tl, 4, static=False)(one).map(lambda b: (b,)), 10)
    with pytest.raises(AssertionError):  # the companion: the dynamic evaluation ends in a batch of 3
        _assert_fixed_pretraining(dynamic, 4)
    # Two replicas fed by one pipeline: a whole number of steps (4 batches of 4; the last two padding).
    two = list(_pretraining_fn(path, tl, 8, static=True)(tf.distribute.InputContext(1, 0, 2)))
    assert [float(np.sum(b["is_real_example"])) for b in two] == [4.0, 4.0, 3.0, 0.0]

    keras.utils.set_random_seed(2)
    pretrainer = AlbertPretrainer(tl.tiny_config(initializer_range=0.5))
    want = training.evaluate(pretrainer, _pretraining_fn(path, tl, 4, static=False))
    got = training.evaluate(pretrainer, _pretraining_fn(path, tl, 4, static=True))
    assert want["num_examples"] == got["num_examples"] == 11
    _assert_same_results(got, want)
    # The companion: padding rows counted as examples change the results.
    counted = training.evaluate(pretrainer, lambda ctx: _pretraining_fn(path, tl, 4, static=True)(ctx).map(
        lambda b: {k: v for k, v in b.items() if k != "is_real_example"}))
    assert counted["num_examples"] == 12
    with pytest.raises(AssertionError):
        _assert_same_results(counted, want)


# ------------------------------------------------------------------ albert-finetune
def finetune_argv(head, data_dir, output_dir, spm, config_file, *extra):
    """albert-finetune's command line for `head`: random init, one pass, every shared flag explicit."""
    return [f"--task={head.task}", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--albert_config_file={config_file}", f"--spm_model_file={spm}",
            f"--max_seq_length={fh.MAX_SEQ_LENGTH}", f"--train_batch_size={fh.BATCH}",
            f"--eval_batch_size={fh.BATCH}", "--learning_rate=1e-3", "--num_train_epochs=1",
            "--warmup_proportion=0.1", "--strategy=default", "--mixed_precision=float32", "--seed=1",
            "--log_steps=1", "--max_query_length=8", "--doc_stride=8", "--max_qa_length=16",
            "--optimizer=adamw", "--save_checkpoints_steps=1000", f"--static_length_step={fh.LENGTH_STEP}",
            "--nojit_compile", "--nostatic_shapes", "--pooling=pooled", *extra]


def run_finetune_binary(argv):
    """albert-finetune's main in this process, flags parsed as on the command line."""
    from absl import flags

    from albert_tf.bin import finetune

    finetune._define_flags()
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["albert-finetune"] + list(argv))
    try:
        options = finetune.options_from_flags()
        finetune.main(["albert-finetune"])
        return options
    finally:
        flags.FLAGS.unparse_flags()


def _record_encoder_shapes(monkeypatch):
    """The shape of every input_ids batch the encoder runs on (a host callback in its graph)."""
    from albert_tf.models.encoder import AlbertEncoder

    seen, original = [], AlbertEncoder.call

    def call(self, inputs, *args, **kwargs):
        tf.py_function(lambda shape: seen.append(tuple(shape.numpy().tolist())) or 0,
                       [tf.shape(inputs["input_ids"])], tf.int32)
        return original(self, inputs, *args, **kwargs)

    monkeypatch.setattr(AlbertEncoder, "call", call)
    return seen


def _numbers_or_text(path):
    """A prediction file as rows of floats (where a field is one) and strings."""
    def value(field):
        try:
            return float(field)
        except ValueError:
            return field

    with open(path, encoding="utf-8") as f:
        return [[value(field) for field in line.rstrip("\n").split("\t")] for line in f]


def test_albert_finetune_static_shapes_end_to_end(spm, tmp_path, monkeypatch):
    from albert_tf.tasks.runner import read_eval_results

    head = fh.HEADS["classifier_single"]
    data_dir = head.make_data(str(tmp_path / "data"))
    config_file = str(tmp_path / "albert_config.json")
    tiny_config().to_json_file(config_file)
    out = str(tmp_path / "out")
    seen = _record_encoder_shapes(monkeypatch)
    options = run_finetune_binary(finetune_argv(head, data_dir, out, spm, config_file, "--static_shapes",
                                                "--do_train", "--do_eval", "--do_predict"))
    assert options.task_options.static_shapes and options.task_options.static_length_step == fh.LENGTH_STEP
    run = [shape for shape in seen if shape not in ((1, 2), (1, 3))]  # not the models' construction-time calls
    # 3 training steps (14 // 4), dev evaluation after the epoch, then --do_eval and --do_predict: 2 batches each.
    assert len(run) == 3 + 2 + 2 + 2, run
    assert all(rows == fh.BATCH and length in LENGTHS for rows, length in run), run
    static_results = read_eval_results(os.path.join(out, "eval_results.txt"))
    static_files = {name: _numbers_or_text(os.path.join(out, name))
                    for name in ("test_results.tsv", "submit_results.tsv")}
    assert len(static_files["submit_results.tsv"]) == 1 + 7  # header + each dev example once

    # The same model evaluated and predicted with dynamic shapes.
    run_finetune_binary(finetune_argv(head, data_dir, out, spm, config_file, "--nodo_train", "--do_eval",
                                      "--do_predict"))
    _assert_same_results(read_eval_results(os.path.join(out, "eval_results.txt")), static_results)
    for name, rows in static_files.items():
        again = _numbers_or_text(os.path.join(out, name))
        assert len(again) == len(rows)
        for got, want in zip(again, rows):
            assert [g if isinstance(g, str) else pytest.approx(g, rel=RTOL, abs=ATOL) for g in got] == want, name


def test_albert_pretrain_static_shapes_evaluation(tmp_path):
    """albert-pretrain --static_shapes evaluates 11 records in 3 batches of 4 (the last padded) to the numbers
    of the dynamic evaluation (whose last batch holds 3)."""
    import subprocess

    import albert_tf
    from albert_tf import AlbertPretrainer
    from albert_tf.training.common import EVAL_RESULTS_FILENAME

    tl, path = _pretraining_data(str(tmp_path))
    checkpoint = str(tmp_path / "pretrained")
    keras.utils.set_random_seed(2)
    albert_tf.save_pretrained(AlbertPretrainer(tl.tiny_config(initializer_range=0.5)), checkpoint)
    tl.tiny_config().to_json_file(str(tmp_path / "albert_config.json"))
    results = {}
    for static in (True, False):
        out = tmp_path / f"out_{static}"
        command = [sys.executable, "-m", "albert_tf.bin.pretrain", f"--init_checkpoint={checkpoint}",
                   f"--albert_config_file={tmp_path / 'albert_config.json'}", f"--eval_input_file={path}",
                   f"--output_dir={out}", "--nodo_train", "--do_eval", "--eval_batch_size=4", "--max_eval_steps=10",
                   "--max_seq_length=16", "--max_predictions_per_seq=3", "--mixed_precision=float32",
                   "--static_shapes" if static else "--nostatic_shapes"]
        proc = subprocess.run(command, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert ("Static shapes: evaluation batches of 4" in proc.stderr) is static
        from albert_tf.tasks.runner import read_eval_results

        results[static] = read_eval_results(str(out / EVAL_RESULTS_FILENAME))
    assert results[True]["num_examples"] == 11
    _assert_same_results(results[True], results[False])
