"""LAMB, AdamW and the schedule against a NumPy port of the original formulas."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import optimization

WD, B1, B2, EPS = 0.01, 0.9, 0.999, 1e-6


def _np_original_step(w, g, m, v, lr, decay, adapt, t=None):
    """One step of lamb_optimizer.LAMBOptimizer / AdamWeightDecayOptimizer;
    with t (1, 2, ...), Adam's bias correction as torch.optim.AdamW does it:
    w *= 1 - lr * wd; w -= lr * m_hat / (sqrt(v_hat) + eps)."""
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    if t is not None:
        assert not adapt  # bias-corrected LAMB is not a reference formula here
        w = w * (1 - lr * WD) if decay else w
        return w - lr * (m / (1 - B1 ** t)) / (np.sqrt(v / (1 - B2 ** t)) + EPS), m, v
    u = m / (np.sqrt(v) + EPS)
    if decay:
        u = u + WD * w
    r = 1.0
    if adapt:
        w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(u)
        r = w_norm / u_norm if (w_norm > 0 and u_norm > 0) else 1.0
    return w - r * lr * u, m, v


def _np_clip(grads, clip_norm):
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
    return [g * clip_norm / max(norm, clip_norm) for g in grads]


def _variables():
    """Variables whose Keras paths exercise the exclusion regexes."""
    rng = np.random.default_rng(0)
    dense = keras.layers.Dense(3, name="dense")
    dense.build((None, 4))
    norm = keras.layers.LayerNormalization(name="LayerNorm")
    norm.build((None, 3))
    head = keras.layers.Dense(2, name="mlm_head")
    head.build((None, 3))
    emb = keras.layers.Embedding(7, 3, name="word_embeddings")
    emb.build((None,))
    for var in (dense.kernel, dense.bias, norm.gamma, norm.beta, emb.embeddings):
        var.assign(rng.normal(size=var.shape).astype("float32"))
    head.kernel.assign(np.zeros(head.kernel.shape, "float32"))  # zero norm
    variables = [dense.kernel, dense.bias, norm.gamma, norm.beta,
                 emb.embeddings, head.kernel, head.bias]
    excluded = {"dense/bias", "LayerNorm/gamma", "LayerNorm/beta",
                "mlm_head/bias"}
    assert {v.path for v in variables} >= excluded  # the names the test relies on
    flags = [v.path not in excluded for v in variables]
    return variables, flags


def _run(opt_cls, adapt, steps, lr, clip=None, grad_scale=1.0, bias_correction=False):
    variables, flags = _variables()
    opt = opt_cls(learning_rate=lr, global_clipnorm=clip, bias_correction=bias_correction)
    rng = np.random.default_rng(1)
    ws = [v.numpy().astype(np.float64) for v in variables]
    ms = [np.zeros_like(w) for w in ws]
    vs = [np.zeros_like(w) for w in ws]
    for step in range(steps):
        grads = [grad_scale * rng.normal(size=w.shape) for w in ws]
        grads[-2] = np.zeros_like(grads[-2]) if step == 0 else grads[-2]
        opt.apply_gradients(
            [(tf.constant(g, tf.float32), v) for g, v in zip(grads, variables)])
        if clip:
            grads = _np_clip(grads, clip)
        lr_t = lr(step) if callable(lr) else lr
        lr_t = float(lr_t)
        for i, flag in enumerate(flags):
            ws[i], ms[i], vs[i] = _np_original_step(
                ws[i], grads[i], ms[i], vs[i], lr_t, decay=flag,
                adapt=adapt and flag, t=step + 1 if bias_correction else None)
    return variables, ws, flags


@pytest.mark.parametrize("opt_cls,adapt", [
    (optimization.Lamb, True), (optimization.AdamWeightDecay, False)])
def test_one_step_matches_numpy_original(opt_cls, adapt):
    variables, expected, _ = _run(opt_cls, adapt, steps=1, lr=0.01)
    for var, want in zip(variables, expected):
        np.testing.assert_allclose(var.numpy(), want, rtol=2e-6, atol=1e-7,
                                   err_msg=var.path)


@pytest.mark.parametrize("opt_cls,adapt", [
    (optimization.Lamb, True), (optimization.AdamWeightDecay, False)])
def test_steps_with_schedule_and_clipping_match_numpy(opt_cls, adapt):
    schedule = optimization.WarmupPolynomialDecay(0.05, decay_steps=10,
                                                  warmup_steps=2)
    # grad_scale makes the global norm far above 1.0, so clipping is active.
    variables, expected, _ = _run(opt_cls, adapt, steps=4, lr=schedule,
                                  clip=1.0, grad_scale=3.0)
    for var, want in zip(variables, expected):
        np.testing.assert_allclose(var.numpy(), want, rtol=2e-5, atol=1e-6,
                                   err_msg=var.path)


@pytest.mark.parametrize("bias_correction", [False, True])
def test_adamw_steps_with_decay_exclusions_schedule_clipping_match_numpy(bias_correction):
    # Both variants over 6 steps: warmup then decay, global clipping active,
    # weight decay on kernels/embeddings only, a zero gradient on step 1.
    schedule = optimization.WarmupPolynomialDecay(0.05, decay_steps=10, warmup_steps=2)
    variables, expected, flags = _run(optimization.AdamWeightDecay, False, steps=6, lr=schedule,
                                      clip=1.0, grad_scale=3.0, bias_correction=bias_correction)
    assert any(flags) and not all(flags)
    for var, want in zip(variables, expected):
        np.testing.assert_allclose(var.numpy(), want, rtol=2e-5, atol=1e-6, err_msg=var.path)


def test_bias_corrected_first_step_is_lr_times_sign_by_hand():
    # Step 1 with bias correction: m_hat = g, v_hat = g^2, so the step is
    # lr * g / (|g| + eps) ~ lr * sign(g) whatever |g|; the original's step is
    # lr * 0.1 g / (sqrt(0.001) |g| + eps) ~ 3.16 lr * sign(g).
    g = np.array([4.0, -0.5, 1e-3], "float32")
    moved = {}
    for correction in (True, False):
        bias = keras.Variable(np.zeros(3, "float32"), name="bias")  # excluded from weight decay
        optimization.AdamWeightDecay(learning_rate=0.01, bias_correction=correction).apply_gradients(
            [(tf.constant(g), bias)])
        moved[correction] = bias.numpy()
    np.testing.assert_allclose(moved[True], [-0.01 * 4 / (4 + 1e-6), 0.01 * 0.5 / (0.5 + 1e-6),
                                             -0.01 * 1e-3 / (1e-3 + 1e-6)], rtol=1e-5)
    np.testing.assert_allclose(moved[False], [-0.0316225, 0.0316208, -0.0306534], rtol=1e-5)
    # Weight decay with correction: w -= lr * (g / (|g| + eps) + wd * w).
    kernel = keras.Variable(np.full(3, 2.0, "float32"), name="kernel")
    optimization.AdamWeightDecay(learning_rate=0.01, bias_correction=True).apply_gradients(
        [(tf.constant(g), kernel)])
    np.testing.assert_allclose(kernel.numpy(), 2.0 - 0.01 * (g / (np.abs(g) + 1e-6) + 0.01 * 2.0), rtol=1e-6)


def test_lamb_first_step_is_not_keras_lamb():
    # Hand-worked: zero weight, excluded from decay and adaptation (a bias),
    # gradient 1: u = 0.1 / (sqrt(0.001) + 1e-6) = 3.16218, step = lr * u.
    bias = keras.Variable(np.zeros(2, "float32"), name="bias")
    opt = optimization.Lamb(learning_rate=0.01)
    opt.apply_gradients([(tf.ones(2), bias)])
    np.testing.assert_allclose(bias.numpy(), [-0.0316218] * 2, rtol=1e-5)
    # keras.optimizers.Lamb moves -0.0100 here (bias correction).
    bias_k = keras.Variable(np.zeros(2, "float32"), name="bias")
    keras.optimizers.Lamb(learning_rate=0.01).apply_gradients(
        [(tf.ones(2), bias_k)])
    assert not np.allclose(bias_k.numpy(), bias.numpy(), rtol=0.1)


def test_trust_ratio_sets_step_norm_to_lr_times_weight_norm():
    w0 = np.array([[3.0, 4.0], [0.0, 12.0]], "float32")
    kernel = keras.Variable(w0, name="kernel")
    opt = optimization.Lamb(learning_rate=0.1, weight_decay_rate=0.0)
    opt.apply_gradients([(tf.constant([[1.0, -2.0], [0.5, 7.0]]), kernel)])
    step_norm = np.linalg.norm(kernel.numpy() - w0)
    np.testing.assert_allclose(step_norm, 0.1 * np.linalg.norm(w0), rtol=1e-5)


def test_nonfinite_gradients_leave_state_unchanged():
    kernel = keras.Variable(np.ones((2, 2), "float32"), name="kernel")
    bias = keras.Variable(np.ones(2, "float32"), name="bias")
    opt = optimization.Lamb(learning_rate=0.1, global_clipnorm=1.0)
    opt.apply_gradients([(tf.ones((2, 2)), kernel), (tf.ones(2), bias)])
    before = [kernel.numpy(), bias.numpy()] + [s.numpy() for s in opt._adam_m]
    # One NaN in one variable: clipping spreads it, so nothing moves.
    opt.apply_gradients([(tf.constant([[1.0, np.nan], [1.0, 1.0]]), kernel),
                         (tf.ones(2), bias)])
    after = [kernel.numpy(), bias.numpy()] + [s.numpy() for s in opt._adam_m]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_indexed_slices_gradient_equals_dense_with_clipping():
    # Row 2 appears twice: the dense gradient row is the sum, and the global
    # norm (sqrt(4+16+36) > 1, so clipping is active) is the dense norm.
    table = np.arange(12, dtype="float32").reshape(4, 3) / 10
    results = []
    for sparse in (False, True):
        var = keras.Variable(table, name="word_embeddings")
        opt = optimization.Lamb(learning_rate=0.1, global_clipnorm=1.0)
        values = tf.constant([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
        if sparse:
            grad = tf.IndexedSlices(values, tf.constant([2, 2]),
                                    tf.constant([4, 3]))
        else:
            grad = tf.constant([[0.0] * 3, [0.0] * 3, [2.0, 4.0, 6.0],
                                [0.0] * 3])
        opt.apply_gradients([(grad, var)])
        opt.apply_gradients([(grad, var)])  # second step: m, v depend on scale
        results.append(var.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def _np_schedule(step, lr0, total, warmup, power, start=0):
    decayed = lr0 * (1 - min(step, total) / total) ** power
    if warmup and step - start < warmup:
        return lr0 * (step - start) / warmup
    return decayed


@pytest.mark.parametrize("warmup,power,start", [(10, 1.0, 0), (0, 1.0, 0),
                                                (10, 0.5, 3)])
def test_schedule_matches_original_formula(warmup, power, start):
    schedule = optimization.WarmupPolynomialDecay(
        0.00176, decay_steps=100, warmup_steps=warmup, power=power,
        start_warmup_step=start)
    for step in [0, 1, 5, 9, 10, 11, 12, 13, 50, 99, 100, 150]:
        np.testing.assert_allclose(
            float(schedule(step)),
            _np_schedule(step, 0.00176, 100, warmup, power, start),
            rtol=1e-6, atol=1e-12, err_msg=f"step {step}")


@pytest.mark.parametrize("warmup,power,start", [(10, 1.0, 0), (0, 1.0, 0), (10, 0.5, 3), (100, 1.0, 0)])
def test_schedule_decaying_after_warmup_matches_the_formula(warmup, power, start):
    # Hugging Face's get_linear_schedule_with_warmup for power 1: lr0 * (T - s) / (T - W) after warmup.
    def want(step):
        if warmup and step - start < warmup:
            return 0.00176 * (step - start) / warmup
        span = 100 - warmup
        return 0.00176 * ((span - min(max(step - start - warmup, 0), span)) / max(span, 1)) ** power

    schedule = optimization.WarmupPolynomialDecay(0.00176, decay_steps=100, warmup_steps=warmup, power=power,
                                                  start_warmup_step=start, decay_after_warmup=True)
    for step in [0, 1, 5, 9, 10, 11, 12, 13, 50, 99, 100, 103, 150]:
        np.testing.assert_allclose(float(schedule(step)), want(step), rtol=1e-5, atol=1e-12,  # float32
                                   err_msg=f"step {step}")
    assert float(schedule(start + warmup)) == pytest.approx(0.00176 if warmup < 100 else 0.0, rel=1e-6)
    clone = optimization.WarmupPolynomialDecay(**schedule.get_config())
    assert clone.decay_after_warmup and float(clone(50)) == float(schedule(50))


def test_schedule_drops_at_end_of_warmup_like_the_original():
    # Paper recipe: the rate drops from ~lr0 to lr0 * (1 - 3125/125000).
    schedule = optimization.WarmupPolynomialDecay(0.00176, 125000, 3125)
    np.testing.assert_allclose(float(schedule(3124)), 0.00176 * 3124 / 3125,
                               rtol=1e-6)
    np.testing.assert_allclose(float(schedule(3125)), 0.00176 * 0.975,
                               rtol=1e-6)


def test_config_round_trip_and_bad_values():
    opt = optimization.create_optimizer("lamb", optimization.WarmupPolynomialDecay(
        1e-3, 10, 2))
    clone = optimization.Lamb.from_config(opt.get_config())
    assert clone.get_config() == opt.get_config()
    corrected = optimization.AdamWeightDecay(1e-3, bias_correction=True)
    assert optimization.AdamWeightDecay.from_config(corrected.get_config()).bias_correction is True
    assert opt.bias_correction is False  # create_optimizer keeps the original's maths for pretraining
    assert clone.global_clipnorm == 1.0 and clone.epsilon == 1e-6
    with pytest.raises(ValueError, match="'sgd'"):
        optimization.create_optimizer("sgd", 1e-3)
    with pytest.raises(ValueError, match="weight_decay"):
        optimization.Lamb(weight_decay=0.1)
    with pytest.raises(ValueError, match="-1"):
        optimization.WarmupPolynomialDecay(1e-3, 10, warmup_steps=-1)


def test_exclusions_on_the_albert_pretrainer_variables():
    # The contract with the model: every LayerNorm gamma/beta and every bias
    # (the MLM output bias included) is excluded, embeddings and kernels not.
    import albert_tf

    model = albert_tf.AlbertPretrainer(albert_tf.AlbertConfig.tiny())
    opt = optimization.Lamb()
    opt.build(model.trainable_variables)
    paths = [v.path for v in model.trainable_variables]
    excluded = {p for p, decay in zip(paths, opt._decay_flags) if not decay}
    adapted = {p for p, adapt in zip(paths, opt._adapt_flags) if adapt}
    assert excluded == {p for p in paths
                        if "layer_norm" in p or p.endswith("bias")}, paths
    assert adapted == set(paths) - excluded
    assert "albert_pretrainer/mlm_head/output_bias" in excluded
    assert "albert_encoder/embeddings/word_embeddings" in adapted


# ----------------------------------------------------------- Keras internals
# albert_tf/optimization.py overrides or calls these private parts of Keras's
# TensorFlow-backend optimizer (tested with Keras 3.15; setup.py pins
# keras>=3.15,<3.16). Name -> the leading parameters after `self`.
KERAS_INTERNALS = {
    "build": ("variables",),
    "update_step": ("gradient", "variable", "learning_rate"),
    "_backend_update_step": ("grads", "trainable_variables", "learning_rate"),
    "_clip_gradients": ("grads",),
    "_all_reduce_sum_gradients": ("grads_and_vars",),
    "_distributed_tf_update_step": ("distribution", "grads_and_vars", "learning_rate"),
    "_get_variable_index": ("variable",),
    "add_optimizer_variables": ("trainable_variables", "name"),
    "assign": ("variable", "value"),
}


def _keras_changed(problems):
    return (f"Keras {keras.__version__} changed internals that albert_tf/optimization.py (Lamb, AdamWeightDecay) "
            "relies on; it was written against Keras 3.15 (setup.py pins keras>=3.15,<3.16):\n  "
            + "\n  ".join(problems))


def test_keras_internals_the_optimizers_rely_on_still_exist():
    import inspect

    base = keras.optimizers.Optimizer
    problems = []
    for name, expected in KERAS_INTERNALS.items():
        method = getattr(base, name, None)
        if method is None:
            problems.append(f"keras.optimizers.Optimizer.{name} no longer exists")
            continue
        parameters = tuple(inspect.signature(method).parameters)[1:1 + len(expected)]
        if name == "build":  # only the arity matters: it is called positionally
            parameters, expected = len(parameters), len(expected)
        if parameters != expected:
            problems.append(f"keras.optimizers.Optimizer.{name}{inspect.signature(method)}: "
                            f"expected the parameters {expected}")
    optimizer = optimization.Lamb(learning_rate=0.01)
    if not hasattr(optimizer, "_distribution_strategy"):
        problems.append("an optimizer no longer has the attribute _distribution_strategy")
    interim = getattr(getattr(tf.__internal__, "distribute", None), "interim", None)
    if not hasattr(interim, "maybe_merge_call"):
        problems.append("tf.__internal__.distribute.interim.maybe_merge_call no longer exists")
    assert not problems, _keras_changed(problems)


def test_keras_still_calls_the_overridden_hooks_and_one_step_matches_numpy():
    calls = []

    class RecordingLamb(optimization.Lamb):
        def _clip_gradients(self, grads):
            calls.append("_clip_gradients")
            return super()._clip_gradients(grads)

        def _backend_update_step(self, grads, trainable_variables, learning_rate):
            calls.append("_backend_update_step")
            return super()._backend_update_step(grads, trainable_variables, learning_rate)

        def update_step(self, gradient, variable, learning_rate):
            calls.append("update_step")
            return super().update_step(gradient, variable, learning_rate)

    variables, flags = _variables()
    optimizer = RecordingLamb(learning_rate=0.01, global_clipnorm=1.0)
    rng = np.random.default_rng(2)
    grads = [3.0 * rng.normal(size=v.shape) for v in variables]  # global norm far above 1: clipping matters
    expected = [v.numpy().astype(np.float64) for v in variables]
    optimizer.apply_gradients([(tf.constant(g, tf.float32), v) for g, v in zip(grads, variables)])

    problems = [f"Keras no longer calls Optimizer.{hook} from apply_gradients" for hook in
                ("_clip_gradients", "_backend_update_step", "update_step") if hook not in calls]
    assert not problems, _keras_changed(problems)
    for i, (g, flag) in enumerate(zip(_np_clip(grads, 1.0), flags)):
        expected[i], _, _ = _np_original_step(expected[i], g, 0.0, 0.0, 0.01, decay=flag, adapt=flag)
    for var, want in zip(variables, expected):
        np.testing.assert_allclose(
            var.numpy(), want, rtol=2e-6, atol=1e-7,
            err_msg=_keras_changed([f"one LAMB step on {var.path} no longer matches the original's formula "
                                    "(clipping after the all-reduce, update_step maths)"]))
