"""albert_tf.optimizers: the fine-tuning AdamW factory, its schedule and
layer-wise learning-rate decay, against NumPy."""

import math
import re

import numpy as np
import pytest

import albert_tf
from albert_tf import optimizers
from tests.albert_tf.task_testlib import tiny_config


def test_linear_warmup_decay_against_the_formula():
    schedule = optimizers.linear_warmup_decay(2.0, num_train_steps=50, warmup_proportion=0.2)
    for step in (0, 3, 9, 10, 11, 30, 49, 50, 60):
        want = 2.0 * step / 10 if step < 10 else 2.0 * (1 - min(step, 50) / 50)
        assert float(schedule(step)) == pytest.approx(want, abs=1e-6), step
    with pytest.raises(ValueError, match="num_train_steps must be positive, got 0"):
        optimizers.linear_warmup_decay(1.0, 0)


def test_decay_after_warmup_reaches_the_peak_as_hugging_face():
    # transformers.get_linear_schedule_with_warmup: s / W in warmup, then (T - s) / (T - W).
    schedule = optimizers.linear_warmup_decay(2.0, num_train_steps=50, warmup_proportion=0.2, decay_after_warmup=True)
    for step in (0, 3, 9, 10, 11, 30, 49, 50, 60):
        want = 2.0 * step / 10 if step < 10 else 2.0 * max(0, 50 - step) / 40
        assert float(schedule(step)) == pytest.approx(want, abs=1e-6), step

    def schedule_of(opt):
        return opt.get_config()["learning_rate"]["config"]

    assert schedule_of(optimizers.adamw(2.0, num_train_steps=50, decay_after_warmup=True))["decay_after_warmup"]
    assert not schedule_of(optimizers.adamw(2.0, num_train_steps=50))["decay_after_warmup"]  # the original's


def _depth_of(model, depths, pattern):
    found = {d for name, d in depths.items() if re.search(pattern, name)}
    assert len(found) == 1, (pattern, found)
    return found.pop()


@pytest.mark.parametrize("sharing,groups,layers,want", [
    # (embeddings, attention per layer, ffn per layer, head)
    ("all", 1, 2, (0, [1, 1], [1, 1], 2)),
    ("all", 2, 4, (0, [1, 1, 2, 2], [1, 1, 2, 2], 3)),
    ("none", 1, 2, (0, [1, 2], [1, 2], 3)),
    ("attention", 1, 2, (0, [2, 2], [1, 2], 3)),  # the shared attention sits at the top
    ("ffn", 1, 2, (0, [1, 2], [2, 2], 3)),
])
def test_layerwise_depths_for_every_sharing_mode(sharing, groups, layers, want):
    from albert_tf.layers.transformer_stack import group_for_layer

    config = tiny_config(sharing=sharing, num_hidden_groups=groups, num_hidden_layers=layers)
    clf = albert_tf.AlbertClassifier(config, 2)
    depths, top = optimizers.layerwise_depths(clf)
    assert top == want[3]
    assert _depth_of(clf, depths, "embeddings/word_embeddings") == 0
    assert _depth_of(clf, depths, "embedding_projection/kernel") == 0
    assert _depth_of(clf, depths, "pooler/kernel") == top
    assert _depth_of(clf, depths, "classifier/output_weights") == top
    stack = clf.encoder.transformer
    for part, groups_of, expected in (("attention", stack.attention_groups, want[1]),
                                      ("ffn", stack.ffn_groups, want[2])):
        for layer in range(layers):
            g = group_for_layer(layer, layers, len(groups_of))
            depth = _depth_of(clf, depths, f"{part}_group_{g}_inner_0/.*/kernel$")
            assert depth == expected[layer], (part, layer)


@pytest.mark.parametrize("bias_correction", [True, False])
def test_adamw_steps_with_layerwise_decay_against_numpy(bias_correction):
    # Two steps on the classifier's real variables: layer-wise factors, global
    # clip, weight decay except LayerNorm/bias, with and without bias correction.
    clf = albert_tf.AlbertClassifier(tiny_config(), 2)
    lr, decay = 0.1, 0.5
    kwargs = {} if bias_correction else {"bias_correction": False}  # True is the default
    opt = optimizers.adamw(lr, layerwise_lr_decay=decay, model=clf, **kwargs)
    variables = clf.trainable_variables
    rng = np.random.default_rng(0)
    want = [v.numpy().astype(np.float64) for v in variables]
    ms = [np.zeros_like(w) for w in want]
    vs = [np.zeros_like(w) for w in want]
    depths, top = optimizers.layerwise_depths(clf)
    for t in (1, 2):
        grads = [rng.normal(size=v.shape).astype(np.float32) for v in variables]
        opt.apply_gradients(zip(grads, variables))
        norm = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
        scale = 1.0 / max(norm, 1.0)  # global clip 1.0
        for i, (var, g) in enumerate(zip(variables, grads)):
            g = g * scale
            ms[i] = 0.9 * ms[i] + 0.1 * g
            vs[i] = 0.999 * vs[i] + 0.001 * g * g
            m, v = (ms[i] / (1 - 0.9 ** t), vs[i] / (1 - 0.999 ** t)) if bias_correction else (ms[i], vs[i])
            update = m / (np.sqrt(v) + (1e-8 if bias_correction else 1e-6))  # the defaults
            if not re.search("LayerNorm|layer_norm|bias", var.path):
                update = update + 0.01 * want[i]
            want[i] = want[i] - lr * decay ** (top - depths[var.path]) * update
    for var, w in zip(variables, want):
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-5, atol=1e-6, err_msg=var.path)
    assert {round(x, 6) for x in opt.lr_multipliers.values()} == {0.25, 0.5, 1.0}


def test_adamw_arguments():
    opt = optimizers.adamw(1e-3, num_train_steps=10)
    assert (opt.weight_decay_rate, opt.global_clipnorm, opt.epsilon) == (0.01, 1.0, 1e-8)
    assert opt.bias_correction is True  # the default since issue 15
    original = optimizers.adamw(1e-3, bias_correction=False)
    assert (original.bias_correction, original.epsilon) == (False, 1e-6)  # the original's maths
    assert optimizers.adamw(1e-3, epsilon=1e-7).epsilon == 1e-7
    with pytest.raises(ValueError, match="epsilon must be positive, got 0.0"):
        optimizers.adamw(1e-3, epsilon=0.0)
    assert opt.lr_multipliers is None
    with pytest.raises(ValueError, match="needs model="):
        optimizers.adamw(1e-3, layerwise_lr_decay=0.8)
    with pytest.raises(ValueError, match="layerwise_lr_decay must be in \\(0, 1\\], got 1.5"):
        optimizers.layerwise_lr_multipliers(albert_tf.AlbertClassifier(tiny_config(), 2), 1.5)
