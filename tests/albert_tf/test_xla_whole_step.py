"""The whole training step under XLA, as TPUStrategy compiles it, checked on a CPU.

Pretraining: `--jit_whole_step` compiles forward, backward, gradient accumulation, loss scaling, the
non-finite guard, the all-reduce and the LAMB update as one XLA program. Fine-tuning: the runner's own
compile (albert-finetune --jit_compile: the task's loss and metrics, AdamW with its exclusions, clipping
and schedule) compiles `train_step` for every head, fed ids made in the input pipeline. Each compiled run
must equal the uncompiled one within float32 tolerance, and an op XLA cannot compile must fail the step
with its name (shown by injecting one where only the whole-step compilation reaches).

Two replicas (MirroredStrategy over 2 logical CPU devices, in a subprocess): the compiled forward and
backward pass equals the uncompiled run; the whole step is refused, and on TensorFlow's multi-GPU XLA path
(emulated) it is shown to fail only at the Keras optimizer's merge_call and, past that, at the CPU's missing
XLA collectives.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import optimization, training
from albert_tf.tasks import FinetuneOptions, get_task, runner
from tests.albert_tf import finetune_heads as fh
from tests.albert_tf.task_testlib import tiny_config as task_config
from tests.albert_tf.task_testlib import train_tiny_spm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402

# Float32 XLA fuses and reorders sums, so entries move by float32 rounding of each step's update (about 1e-7
# of the weights' scale); Adam-style updates amplify that for near-zero gradient entries (see
# test_training._assert_weights_close), hence the same bounds as there. A wrong update (no step, other
# learning rate) moves the weights by 1e-3 or more: `test_the_weight_check_fails_on_a_wrong_update`.
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("xla_data")
    tl.write_tfrecords(str(root / "a.tfrecord"), 32, seed=3)
    return str(root / "*.tfrecord")


def _pretrain(data, output_dir, **kwargs):
    args = dict(train_batch_size=8, num_train_steps=3, num_warmup_steps=1, learning_rate=0.01,
                save_checkpoints_steps=10, log_steps=1, max_seq_length=tl.SEQ,
                max_predictions_per_seq=tl.PREDS, seed=11, gradient_accumulation_steps=2)
    args.update(kwargs)
    result = training.run_pretraining(tl.tiny_config(), tl.make_dataset_fn(data, args["train_batch_size"]),
                                      str(output_dir), **tl.pretraining_kwargs(**args))
    return {v.path: v.numpy() for v in result["model"].weights}


def _assert_equal_weights(got, want, rtol=RTOL, atol=ATOL):
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=atol, err_msg=key)


def _max_difference(got, want):
    return max(float(np.max(np.abs(got[k] - want[k]))) for k in want)


@pytest.fixture(scope="module")
def eager_pretrained(data, tmp_path_factory):
    return _pretrain(data, tmp_path_factory.mktemp("eager"))


def test_pretraining_whole_step_under_xla_equals_the_uncompiled_step(data, tmp_path, eager_pretrained):
    compiled = _pretrain(data, tmp_path / "xla", jit_whole_step=True)
    _assert_equal_weights(compiled, eager_pretrained)


def test_the_weight_check_fails_on_a_wrong_update(data, tmp_path, eager_pretrained):
    """The companion of the equality above: another learning rate is far outside its tolerance."""
    other = _pretrain(data, tmp_path / "other", learning_rate=0.005)
    assert _max_difference(other, eager_pretrained) > 100 * ATOL
    with pytest.raises(AssertionError):
        _assert_equal_weights(other, eager_pretrained)


# float16 activations keep ~3 significant digits and XLA rounds at other points than the op-by-op graph, so
# the compiled float16 step is held to a share of each tensor's own travel: LAMB scales each update by the
# tensor's norm, so kernels move ~2e-4 and biases ~4e-2 in these three steps, and one absolute bound would be
# either far above the kernels' travel or far below the biases'. Measured: at most 2.4% (the SOP head's
# weights), 3.5e-5 absolute; a learning rate of 0.005 instead of 0.01 is off by ~50% on every tensor
# (`test_the_float16_check_fails_on_a_wrong_update_or_none`).
F16_SHARE_OF_TRAVEL = 0.1
# The key projection's bias adds one constant to all logits of a query's softmax: its exact gradient is 0 and
# what arrives is rounding noise (its travel, 4e-7, is noise too), so it is left out.
SOFTMAX_SHIFT = ("attention_group_0_inner_0/key/bias",)


def _assert_follows(got, want, init, share=F16_SHARE_OF_TRAVEL):
    """Asserts that each tensor of `got` is within `share` of `want`'s travel from `init` of `want`.

    Args:
        got: weights by path, of the run under test.
        want: weights by path, of the reference run.
        init: weights by path before training (a run with learning rate 0).
        share: the fraction of the reference's travel allowed.
    """
    assert set(got) == set(want) == set(init)
    checked = [key for key in want if not key.endswith(SOFTMAX_SHIFT)]
    assert len(checked) == len(want) - len(SOFTMAX_SHIFT)
    for key in checked:
        travel = float(np.max(np.abs(want[key] - init[key])))
        difference = float(np.max(np.abs(got[key] - want[key])))
        assert travel > 0 and difference <= share * travel, f"{key}: {difference:.2e} vs travel {travel:.2e}"


@pytest.fixture(scope="module")
def float16_eager(data, tmp_path_factory):
    """(weights after 3 uncompiled float16 steps, the initial weights: the same run with learning rate 0)."""
    return (_pretrain(data, tmp_path_factory.mktemp("eager16"), mixed_precision="float16"),
            _pretrain(data, tmp_path_factory.mktemp("init16"), mixed_precision="float16", learning_rate=0.0))


def test_pretraining_whole_step_with_float16_loss_scaling_compiles_and_follows_the_uncompiled_step(
        data, tmp_path, float16_eager):
    """Loss scaling and the non-finite guard are in the compiled program too (float16 adds them)."""
    eager, init = float16_eager
    compiled = _pretrain(data, tmp_path / "xla16", mixed_precision="float16", jit_whole_step=True)
    _assert_follows(compiled, eager, init)
    assert _max_difference(eager, init) > 1e-2  # the three steps moved the weights (biases by ~4e-2)


def test_the_float16_check_fails_on_a_wrong_update_or_none(data, tmp_path, float16_eager):
    """The companion of the float16 comparison: half the learning rate, or no update, is far outside it."""
    eager, init = float16_eager
    other = _pretrain(data, tmp_path / "other16", mixed_precision="float16", learning_rate=0.005)
    for wrong in (other, init):
        with pytest.raises(AssertionError):
            _assert_follows(wrong, eager, init)


def _optimizer_with_a_string_op(monkeypatch):
    """Makes LAMB's apply_gradients run a string op: outside the micro-step, inside the replica step."""
    original = optimization.Lamb.apply_gradients

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        tf.strings.as_string(self.iterations)  # AsString has no XLA kernel
        return original(self, grads_and_vars, *args, **kwargs)

    monkeypatch.setattr(optimization.Lamb, "apply_gradients", apply_gradients)


def test_an_op_xla_cannot_compile_fails_the_whole_step_with_its_name(data, tmp_path, monkeypatch):
    _optimizer_with_a_string_op(monkeypatch)
    # Compiling only the micro-step (forward and backward) does not reach the optimizer ...
    _pretrain(data, tmp_path / "micro", jit_compile=True, num_train_steps=1)
    # ... the whole step does, and the error names the op.
    with pytest.raises(Exception, match="AsString"):
        _pretrain(data, tmp_path / "whole", jit_whole_step=True, num_train_steps=1)


# ------------------------------------------------------------------ two replicas
WORKER = os.path.join(HERE, "xla_worker.py")
REPO = os.path.dirname(os.path.dirname(HERE))


def _worker(tmp_path, data, **args):
    """xla_worker.py in a fresh process (2 logical CPU devices); its result dict."""
    args.update(data=data, result=str(tmp_path / "result.json"))
    proc = subprocess.run([sys.executable, WORKER, json.dumps(args)], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(tmp_path / "result.json") as f:
        result = json.load(f)
    assert result["replicas"] == 2
    return result


def _run(tmp_path, name, **settings):
    return dict(output_dir=str(tmp_path / name), weights=str(tmp_path / f"{name}.npz"), **settings)


def _config_file(folder):
    """A tiny albert_config.json in `folder` (the runner reads the model's positions before it builds anything)."""
    path = os.path.join(str(folder), "albert_config.json")
    task_config().to_json_file(path)
    return path


def test_two_mirrored_replicas_under_xla(data, tmp_path, eager_pretrained, spm):
    """MirroredStrategy over 2 CPU devices: --jit_compile (each replica's forward and backward one XLA
    program, the all-reduce outside) equals the uncompiled 2-replica run, which equals the one-device run;
    the whole step under XLA (--jit_whole_step) and albert-finetune --jit_compile are refused in one line
    naming why (see `step.whole_step_xla_supported`)."""
    result = _worker(tmp_path, data, runs=[_run(tmp_path, "eager"), _run(tmp_path, "micro", jit_compile=True),
                                           _run(tmp_path, "whole", jit_whole_step=True)],
                     finetune_jit={"data_dir": str(tmp_path), "spm": spm, "config": _config_file(tmp_path)})
    assert result["runs"][:2] == [None, None], result["runs"]
    eager, micro = (dict(np.load(tmp_path / f"{name}.npz")) for name in ("eager", "micro"))
    _assert_equal_weights(micro, eager)
    _assert_equal_weights(eager, eager_pretrained)  # two replicas = one device (global denominators)
    assert result["runs"][2].startswith("TrainingError: --jit_whole_step with 2 replicas works only under "
                                        "TPUStrategy"), result["runs"][2]
    assert result["finetune_jit"].startswith("ValueError: --jit_compile with --strategy=mirrored (2 replicas)")


def test_the_whole_step_on_the_multi_gpu_xla_path_stops_only_where_a_cpu_lacks_collectives(data, tmp_path):
    """MirroredStrategy made to take its multi-GPU XLA path (`xla_worker.take_the_gpu_path`): the whole step
    first fails where Keras's optimizer updates its step counter through merge_call (keras-team/keras#17187,
    why --jit_whole_step is refused on GPUs); with that update done in place on each replica, the step
    (forward, backward, accumulation, all-reduces, LAMB) builds and compiles on both replicas and stops only
    at XLA's missing CPU collectives: what remains for a GPU to check is NCCL itself."""
    result = _worker(tmp_path, data, gpu_path=True,
                     runs=[_run(tmp_path, "keras", jit_whole_step=True),
                           _run(tmp_path, "in_place", jit_whole_step=True, broadcast_in_place=True)])
    keras_error, in_place_error = result["runs"]
    assert "merge_call" in keras_error and "self._iterations.assign_add(1)" in keras_error, keras_error[-3000:]
    assert "Collectives are not yet implemented for CPU devices when compiling with XLA" in in_place_error
    for other in ("merge_call", "Trying to access resource", "AsString", "No registered"):
        assert other not in in_place_error, in_place_error[-3000:]


# ------------------------------------------------------------------ fine-tuning heads, through the runner
@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("xla_spm")))


HEADS = {**fh.HEADS, "classifier_mean_pooling": fh.Head("glue/sst-2", fh.sst2, {"pooling": "mean"})}


def _finetune(name, spm, folder, jit_compile, steps=3):
    """(weights after `steps` steps, initial weights) of albert-finetune's training: the runner's compile
    (the task's loss and metrics, AdamW with weight decay, clipping and schedule) and batches (ids made in
    the input pipeline, static shapes of one length: one program)."""
    head = HEADS[name]
    data_dir = os.path.join(folder, "data")
    if not os.path.isdir(data_dir):
        head.make_data(data_dir)
    options = fh.task_options(head, spm, static_shapes=True, static_length_step=fh.MAX_SEQ_LENGTH)
    task = get_task(head.task, options)
    train = task.read(data_dir, "train")
    run = FinetuneOptions(head.task, data_dir, os.path.join(folder, "out"), task_options=options,
                          train_batch_size=fh.BATCH, learning_rate=1e-2, train_step=4, warmup_step=1,
                          weight_decay_rate=0.01, jit_compile=jit_compile, seed=1)
    keras.utils.set_random_seed(5)
    model = task.build_model(task_config(), None, train)
    init = {v.path: v.numpy() for v in model.weights}
    runner.compile_task_model(model, task, run, runner.training_schedule(task.num_examples(train), run))
    # Keras silently drops XLA for a model with a layer that cannot be compiled: the check would be void.
    assert model.jit_compile is jit_compile
    model.fit(runner.training_batches(task, model, train, run), epochs=1, steps_per_epoch=steps, verbose=0)
    return {v.path: v.numpy() for v in model.weights}, init


# Fine-tuning takes 3 AdamW steps of lr 1e-2 (bias-corrected, epsilon 1e-8): entries with gradients near the
# rounding level move by up to one step either way, and that feeds the next steps' gradients (the pooler after
# a multiple-choice step: 6e-5 measured). 1e-4 is 1/100 of one step; a wrong step is 1e-2.
FINETUNE_RTOL, FINETUNE_ATOL = 1e-3, 1e-4

# Biases the loss cannot see: a bias shared by every position's start/end logit (span QA) or by every choice
# (multiple choice) shifts all logits of one softmax, so its exact gradient is 0 and what arrives is rounding
# noise (~1e-9), which bias-corrected Adam turns into steps of up to the learning rate, differently for any
# two summation orders. The comparison leaves out exactly these.
SHIFT_INVARIANT = {"span_qa_v1": ("squad/output_bias",),
                   # v2's end logits: dense_1(LayerNorm(...)); the LayerNorm's beta reaches every position alike.
                   "span_qa_v2": ("start_logits/bias", "end_logits_dense_1/bias", "end_logits_layer_norm/beta"),
                   "multiple_choice": ("multiple_choice/output_bias",)}


@pytest.mark.parametrize("name", list(HEADS))
def test_finetuning_step_under_xla_equals_the_uncompiled_step(name, spm, tmp_path):
    eager, init = _finetune(name, spm, str(tmp_path), jit_compile=False)
    compiled, _ = _finetune(name, spm, str(tmp_path), jit_compile=True)
    invariant = [k for k in eager if k.endswith(SHIFT_INVARIANT.get(name, ()))]
    assert len(invariant) == len(SHIFT_INVARIANT.get(name, ())), (invariant, sorted(eager))
    seen = [k for k in eager if k not in invariant]
    _assert_equal_weights({k: compiled[k] for k in seen}, {k: eager[k] for k in seen},
                          rtol=FINETUNE_RTOL, atol=FINETUNE_ATOL)
    # Training moved the weights (the comparison is not between two initial states).
    assert _max_difference(eager, init) > 30 * FINETUNE_ATOL


def test_finetuning_string_op_in_the_optimizer_fails_under_xla_with_its_name(spm, tmp_path, monkeypatch):
    original = optimization.AdamWeightDecay.apply_gradients

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        tf.strings.as_string(self.iterations)  # AsString has no XLA kernel
        return original(self, grads_and_vars, *args, **kwargs)

    monkeypatch.setattr(optimization.AdamWeightDecay, "apply_gradients", apply_gradients)
    _finetune("tagging", spm, str(tmp_path), jit_compile=False, steps=1)
    with pytest.raises(Exception, match="AsString"):
        _finetune("tagging", spm, str(tmp_path), jit_compile=True, steps=1)


def test_albert_finetune_jit_compile(spm, tmp_path, monkeypatch):
    """--jit_compile reaches the runner: the model trains, evaluates and predicts XLA-compiled (the text layer in
    the input pipeline), and its dev results equal those of the saved model evaluated without XLA."""
    from albert_tf.tasks.runner import read_eval_results
    from tests.albert_tf.test_static_shapes import finetune_argv, run_finetune_binary

    compiled = []
    original = runner.compile_task_model

    def recording(model, *args):
        compiled.append(original(model, *args).jit_compile)
        return model

    monkeypatch.setattr(runner, "compile_task_model", recording)
    head = fh.HEADS["multiple_choice"]
    data_dir = head.make_data(str(tmp_path / "data"))
    config_file = str(tmp_path / "albert_config.json")
    task_config().to_json_file(config_file)
    out = str(tmp_path / "out")
    results = {}
    for jit in (True, False):
        extra = ("--jit_compile", "--do_train") if jit else ("--nojit_compile", "--nodo_train")
        options = run_finetune_binary(finetune_argv(head, data_dir, out, spm, config_file, "--do_eval", *extra))
        assert options.jit_compile is jit
        results[jit] = read_eval_results(os.path.join(out, "eval_results.txt"))
    assert compiled == [True]
    assert set(results[True]) == set(results[False])
    for key, value in results[False].items():
        assert results[True][key] == pytest.approx(value, rel=1e-5, abs=1e-5), key
