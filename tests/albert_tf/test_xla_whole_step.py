"""The whole training step under XLA, as TPUStrategy compiles it, checked on a CPU.

Pretraining: `--jit_whole_step` compiles forward, backward, gradient accumulation, loss scaling, the
non-finite guard, the all-reduce and the LAMB update as one XLA program. Fine-tuning: Keras's
`compile(jit_compile=True)` compiles `train_step` (forward, backward, AdamW with its exclusions and
clipping) for every head. Each compiled run must equal the uncompiled one within float32 tolerance, and an
op XLA cannot compile must fail the step with its name (shown by injecting one where only the whole-step
compilation reaches).
"""

import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf import optimization, training
from tests.albert_tf.task_testlib import tiny_config as task_config

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


def test_pretraining_whole_step_with_float16_loss_scaling_compiles_and_follows_the_uncompiled_step(
        data, tmp_path):
    """Loss scaling and the non-finite guard are in the compiled program too (float16 adds them)."""
    eager = _pretrain(data, tmp_path / "eager16", mixed_precision="float16")
    compiled = _pretrain(data, tmp_path / "xla16", mixed_precision="float16", jit_whole_step=True)
    # float16 activations keep ~3 significant digits and XLA rounds at other points than the op-by-op
    # graph; three steps of lr 0.01 move weights by ~1e-2, so 2e-3 is still a tenth of the travel.
    for key in eager:
        np.testing.assert_allclose(compiled[key], eager[key], atol=2e-3, err_msg=key)


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


# ------------------------------------------------------------------ fine-tuning heads

def _ids(rng, shape):
    ids = rng.integers(5, 100, size=shape).astype(np.int32)
    ids[..., 0] = 2
    return ids


def _head_data(head: str, rng):
    """(model factory, 4 batches of (features, labels)) for one head; ids in, no preprocessor."""
    config = task_config()
    batches = []
    for _ in range(4):
        if head in ("classifier", "mean_pooling", "regression", "pair"):
            ids = _ids(rng, (4, 12))
            features = {"input_ids": ids}
            if head == "pair":
                features["segment_ids"] = (np.arange(12) >= 6).astype(np.int32)[None].repeat(4, 0)
            labels = (rng.normal(size=4).astype(np.float32) if head == "regression"
                      else rng.integers(0, 3, size=4).astype(np.int32))
        elif head in ("span_qa", "span_qa_v2"):
            features = {"input_ids": _ids(rng, (4, 12))}
            start = rng.integers(0, 12, size=4).astype(np.int32)
            labels = {"start_positions": start,
                      "end_positions": np.minimum(start + rng.integers(0, 3, size=4), 11).astype(np.int32),
                      "is_impossible": rng.integers(0, 2, size=4).astype(np.int32)}
        elif head == "multiple_choice":
            features = {"input_ids": _ids(rng, (4, 3, 10))}
            labels = rng.integers(0, 3, size=4).astype(np.int32)
        else:  # tagging
            features = {"input_ids": _ids(rng, (4, 12))}
            labels = rng.integers(-1, 4, size=(4, 12)).astype(np.int32)
        batches.append((features, labels))

    def build():
        if head == "classifier" or head == "pair":
            return albert_tf.AlbertClassifier(config, 3, dropout_rate=0.0)
        if head == "mean_pooling":
            return albert_tf.AlbertClassifier(config, 3, pooling="mean", dropout_rate=0.0)
        if head == "regression":
            return albert_tf.AlbertClassifier(config, 1, dropout_rate=0.0)
        if head == "span_qa":
            return albert_tf.AlbertSpanQA(config)
        if head == "span_qa_v2":
            return albert_tf.AlbertSpanQA(config, version_2=True)
        if head == "multiple_choice":
            return albert_tf.AlbertMultipleChoice(config, 3, dropout_rate=0.0)
        return albert_tf.AlbertTokenClassifier(config, 4, dropout_rate=0.0)

    return build, batches


def _finetune(build, batches, jit_compile: bool, optimizer_patch=None):
    keras.utils.set_random_seed(5)
    model = build()
    model.compile(optimizer=albert_tf.optimizers.adamw(1e-2, num_train_steps=4, num_warmup_steps=1,
                                                       weight_decay_rate=0.01, global_clipnorm=1.0),
                  jit_compile=jit_compile)
    # Keras silently drops XLA for a model with a layer that cannot be compiled: the check would be void.
    assert model.jit_compile is jit_compile
    for features, labels in batches:
        model.train_on_batch(features, labels)
    return {v.path: v.numpy() for v in model.weights}


# Fine-tuning takes 4 AdamW steps of lr 1e-2 (bias-corrected, epsilon 1e-8): entries with gradients near the
# rounding level move by up to one step either way, and that feeds the next steps' gradients (the pooler after
# a multiple-choice step: 3.6e-5 measured). 1e-4 is 1/100 of one step; a wrong step is 1e-2.
FINETUNE_RTOL, FINETUNE_ATOL = 1e-3, 1e-4

HEADS = ["classifier", "pair", "regression", "mean_pooling", "span_qa", "span_qa_v2", "multiple_choice",
         "tagging"]


# Biases the loss cannot see: a bias shared by every position's start/end logit (span QA) or by every choice
# (multiple choice) shifts all logits of one softmax, so its exact gradient is 0 and what arrives is rounding
# noise (~1e-9), which bias-corrected Adam turns into steps of up to the learning rate, differently for any
# two summation orders. The comparison leaves out exactly these.
SHIFT_INVARIANT = {"span_qa": ("squad/output_bias",), "span_qa_v2": ("start_logits/bias", "end_logits_dense_1/bias"),
                   "multiple_choice": ("multiple_choice/output_bias",)}


@pytest.mark.parametrize("head", HEADS)
def test_finetuning_step_under_xla_equals_the_uncompiled_step(head):
    build, batches = _head_data(head, np.random.default_rng(HEADS.index(head)))
    eager = _finetune(build, batches, jit_compile=False)
    compiled = _finetune(build, batches, jit_compile=True)
    invariant = [k for k in eager if k.endswith(SHIFT_INVARIANT.get(head, ()))]
    assert len(invariant) == len(SHIFT_INVARIANT.get(head, ())), (invariant, sorted(eager))
    seen = [k for k in eager if k not in invariant]
    _assert_equal_weights({k: compiled[k] for k in seen}, {k: eager[k] for k in seen},
                          rtol=FINETUNE_RTOL, atol=FINETUNE_ATOL)
    # Training moved the weights (the comparison is not between two initial states).
    keras.utils.set_random_seed(5)
    init = {v.path: v.numpy() for v in build().weights}
    assert _max_difference(eager, init) > 30 * FINETUNE_ATOL


def test_finetuning_string_op_in_the_optimizer_fails_under_xla_with_its_name(monkeypatch):
    original = optimization.AdamWeightDecay.apply_gradients

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        tf.strings.as_string(self.iterations)
        return original(self, grads_and_vars, *args, **kwargs)

    monkeypatch.setattr(optimization.AdamWeightDecay, "apply_gradients", apply_gradients)
    build, batches = _head_data("classifier", np.random.default_rng(0))
    _finetune(build, batches[:1], jit_compile=False)
    with pytest.raises(Exception, match="AsString"):
        _finetune(build, batches[:1], jit_compile=True)
