"""LAMB and AdamW with the original ALBERT maths, and its learning-rate schedule.

The original (google-research/albert `optimization.py`, `lamb_optimizer.py`)
differs from `keras.optimizers.Lamb` / `keras.optimizers.AdamW` in ways that
change training:

* no Adam bias correction: ``u = m / (sqrt(v) + eps)`` (``bias_correction=True``
  gives Adam's ``m_hat / (sqrt(v_hat) + eps)`` instead, as Hugging Face's and
  torch's AdamW, keras-hub and Model Garden do; `albert_tf.optimizers.adamw`
  makes that its default for fine-tuning);
* decoupled weight decay is *added to the update* (``u += wd * w``) before the
  LAMB trust ratio, so the ratio sees it;
* variables whose name matches ``["LayerNorm", "layer_norm", "bias"]`` (regex
  search) get neither weight decay nor the trust ratio (a plain Adam step);
* the trust ratio is ``||w|| / ||u||`` over the whole tensor, 1 when either norm
  is zero, never clipped;
* gradients are clipped to a global norm of 1.0 *for the global batch*
  (embedding gradients are densified first, so the norm is the gradient's).

Keras clips gradients before its cross-replica all-reduce, which would clip
each replica's share; these optimizers clip after the all-reduce instead, so
the result is the same on one device and on many.

Non-finite gradients (an overflowed float16 step, or a NaN loss) leave the
weights and slots untouched: after global-norm clipping one non-finite value
makes every gradient NaN, so the per-variable check is global.

Example:

```python
import keras
from albert_tf import optimization

schedule = optimization.WarmupPolynomialDecay(
    initial_learning_rate=0.00176, decay_steps=125000, warmup_steps=3125)
opt = optimization.create_optimizer("lamb", schedule)
var = keras.Variable([[1.0, 2.0]], name="kernel")
opt.apply_gradients([(keras.ops.ones((1, 2)), var)])
```
"""

from __future__ import annotations

import re
from typing import Sequence

import keras
import tensorflow as tf

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


def _matches_any(name: str, patterns: Sequence[str] | None) -> bool:
    return any(re.search(p, name) is not None for p in (patterns or ()))


def _variable_name(variable) -> str:
    # Keras 3 variables carry the full layer path; fall back to `name` for
    # plain tf.Variables.
    return getattr(variable, "path", None) or variable.name


@keras.saving.register_keras_serializable(package="albert_tf")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup, then polynomial decay: the original ALBERT schedule.

    ``decayed = (lr0 - end) * (1 - min(step, T) / T) ** power + end`` counted
    from step 0 (`tf.train.polynomial_decay` without cycling); while
    ``step - start_warmup_step < W`` the rate is
    ``lr0 * (step - start_warmup_step) / W`` instead. The rate therefore drops
    at the end of warmup from about lr0 to ``lr0 * (1 - W / T) ** power``, as in
    the original. With ``decay_after_warmup`` the decay instead starts at the
    end of warmup, ``(lr0 - end) * (1 - min(step - W, T - W) / (T - W)) ** power + end``
    (counted from start_warmup_step): the peak is reached, as in Hugging Face's
    `get_linear_schedule_with_warmup`, keras-hub and Model Garden.

    Args:
        initial_learning_rate: peak learning rate lr0.
        decay_steps: T, the step at which the decayed rate reaches
            `end_learning_rate` (the original uses num_train_steps).
        warmup_steps: W; 0 disables warmup.
        power: the polynomial power (the original's poly_power).
        end_learning_rate: the rate at and after step T.
        start_warmup_step: the step warmup is counted from.
        decay_after_warmup: decay over the steps after warmup (peak lr0
            reached) instead of from step 0 (the original's drop to
            ``lr0 * (1 - W / T) ** power`` at the end of warmup).

    Example:

    >>> s = WarmupPolynomialDecay(1.0, decay_steps=100, warmup_steps=10)
    >>> [round(float(s(i)), 3) for i in (0, 5, 9, 10, 100)]
    [0.0, 0.5, 0.9, 0.9, 0.0]
    >>> s = WarmupPolynomialDecay(1.0, decay_steps=100, warmup_steps=10, decay_after_warmup=True)
    >>> [round(float(s(i)), 3) for i in (0, 5, 10, 55, 100)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        warmup_steps: int = 0,
        power: float = 1.0,
        end_learning_rate: float = 0.0,
        start_warmup_step: int = 0,
        decay_after_warmup: bool = False,
    ):
        if decay_steps <= 0:
            raise ValueError(f"decay_steps must be positive, got {decay_steps}.")
        if warmup_steps < 0:
            raise ValueError(
                f"warmup_steps must be >= 0, got {warmup_steps}.")
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = int(decay_steps)
        self.warmup_steps = int(warmup_steps)
        self.power = float(power)
        self.end_learning_rate = float(end_learning_rate)
        self.start_warmup_step = int(start_warmup_step)
        self.decay_after_warmup = bool(decay_after_warmup)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        if self.decay_after_warmup:
            span = float(self.decay_steps - self.warmup_steps)
            decay_step = tf.clip_by_value(step - float(self.start_warmup_step + self.warmup_steps), 0.0,
                                          max(span, 0.0))
        else:
            span = float(self.decay_steps)
            decay_step = tf.minimum(step, span)
        # The share of the decay still ahead; 0 when warmup takes every step (as Hugging Face's).
        remaining = (span - decay_step) / max(span, 1.0)
        decayed = (self.initial_learning_rate - self.end_learning_rate) * tf.pow(
            tf.maximum(remaining, 0.0), self.power
        ) + self.end_learning_rate
        if self.warmup_steps == 0:
            return decayed
        # The original compares int32 step counts; float32 is exact here for
        # any step below 2**24.
        warm_step = step - float(self.start_warmup_step)
        warm = self.initial_learning_rate * warm_step / float(self.warmup_steps)
        return tf.where(warm_step < float(self.warmup_steps), warm, decayed)

    def get_config(self) -> dict:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "warmup_steps": self.warmup_steps,
            "power": self.power,
            "end_learning_rate": self.end_learning_rate,
            "start_warmup_step": self.start_warmup_step,
            "decay_after_warmup": self.decay_after_warmup,
        }


class _AlbertAdamBase(keras.optimizers.Optimizer):
    """Shared maths of the original AdamW and LAMB (bias correction optional)."""

    _use_layer_adaptation = False

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay_rate: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] | None = (
            DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY),
        global_clipnorm: float | None = None,
        name: str | None = None,
        lr_multipliers: dict | None = None,
        bias_correction: bool = False,
        **kwargs,
    ):
        for key in ("weight_decay", "clipnorm", "clipvalue",
                    "gradient_accumulation_steps"):
            if kwargs.get(key) is not None:
                raise ValueError(
                    f"{type(self).__name__} does not support Keras's "
                    f"`{key}`={kwargs[key]!r}: use weight_decay_rate / "
                    "global_clipnorm, and accumulate in the training loop.")
            kwargs.pop(key, None)
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.bias_correction = bool(bias_correction)
        self.exclude_from_weight_decay = (
            list(exclude_from_weight_decay)
            if exclude_from_weight_decay is not None else None)
        # Set after super().__init__ so that Keras's own pre-all-reduce
        # clipping stays off (see _clip_gradients).
        self.global_clipnorm = global_clipnorm
        # Variable path -> factor on the learning rate (layer-wise decay).
        self.lr_multipliers = (
            {str(k): float(v) for k, v in lr_multipliers.items()}
            if lr_multipliers else None)

    def _layer_adaptation_exclusions(self):
        return None

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adam_m, self._adam_v = self.add_optimizer_variables(
            var_list, ["adam_m", "adam_v"])
        # update_step() receives tf.Variables without `.path`: decide per index.
        self._decay_flags = []
        self._adapt_flags = []
        self._lr_factors = []
        for var in var_list:
            name = _variable_name(var)
            self._lr_factors.append(
                (self.lr_multipliers or {}).get(name, 1.0))
            self._decay_flags.append(
                self.weight_decay_rate > 0
                and not _matches_any(name, self.exclude_from_weight_decay))
            self._adapt_flags.append(
                self._use_layer_adaptation
                and not _matches_any(name, self._layer_adaptation_exclusions()))

    def _clip_gradients(self, grads):
        # Clipping happens in _backend_update_step, after the all-reduce.
        return grads

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        variables = [
            v.value if isinstance(v, keras.Variable) else v
            for v in trainable_variables
        ]
        # Dense embedding gradients: the norm of IndexedSlices values counts
        # repeated rows separately (not the gradient's norm), and a dense
        # all-reduce is cheaper than gathering slices for large batches.
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices)
                 else g for g in grads]
        grads_and_vars = self._all_reduce_sum_gradients(
            list(zip(grads, variables)))
        reduced = [g for g, _ in grads_and_vars]
        if self.global_clipnorm:
            reduced, _ = tf.clip_by_global_norm(reduced, self.global_clipnorm)
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_tf_update_step,
            self._distribution_strategy,
            list(zip(reduced, variables)),
            learning_rate,
        )

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        m = self._adam_m[index]
        v = self._adam_v[index]
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        if self._lr_factors[index] != 1.0:
            lr = lr * self._lr_factors[index]
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        g = tf.cast(gradient, dtype)
        w = tf.convert_to_tensor(variable)
        finite = tf.reduce_all(tf.math.is_finite(g))
        g = tf.where(finite, g, tf.zeros_like(g))

        next_m = self.beta_1 * m + (1.0 - self.beta_1) * g
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(g)
        update = self._adam_direction(next_m, next_v, dtype)
        if self._decay_flags[index]:
            update += self.weight_decay_rate * w
        ratio = tf.constant(1.0, dtype)
        if self._adapt_flags[index]:
            w_norm = tf.norm(w)
            u_norm = tf.norm(update)
            ratio = tf.where(
                w_norm > 0.0,
                tf.where(u_norm > 0.0, w_norm / u_norm, 1.0),
                1.0)
        next_w = w - ratio * lr * update
        self.assign(m, tf.where(finite, next_m, m))
        self.assign(v, tf.where(finite, next_v, v))
        self.assign(variable, tf.where(finite, next_w, w))

    def _adam_direction(self, m, v, dtype):
        """m / (sqrt(v) + eps), or with Adam's bias correction
        m_hat / (sqrt(v_hat) + eps), m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t).

        t counts the optimizer's steps from 1 (`iterations` + 1, as Keras's
        Adam); a step skipped for non-finite gradients still counts, so the
        correction then lags by one step (a change of at most a factor
        (1 - b1^t) / (1 - b1^(t-1)), negligible after the first steps)."""
        if not self.bias_correction:
            return m / (tf.sqrt(v) + self.epsilon)
        t = tf.cast(self.iterations + 1, dtype)
        m_hat = m / (1.0 - tf.pow(tf.cast(self.beta_1, dtype), t))
        v_hat = v / (1.0 - tf.pow(tf.cast(self.beta_2, dtype), t))
        return m_hat / (tf.sqrt(v_hat) + self.epsilon)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "bias_correction": self.bias_correction,
            "weight_decay_rate": self.weight_decay_rate,
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "exclude_from_weight_decay": self.exclude_from_weight_decay,
            "global_clipnorm": self.global_clipnorm,
            "lr_multipliers": self.lr_multipliers,
        })
        for key in ("weight_decay", "clipnorm", "clipvalue",
                    "gradient_accumulation_steps"):
            config.pop(key, None)
        return config


@keras.saving.register_keras_serializable(package="albert_tf")
class AdamWeightDecay(_AlbertAdamBase):
    """The original ALBERT/BERT AdamW (`AdamWeightDecayOptimizer`).

    ``m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; u = m / (sqrt(v) + eps)``
    (no bias correction); ``u += weight_decay_rate * w`` unless the variable
    path matches `exclude_from_weight_decay`; ``w -= lr * u``.

    With ``bias_correction=True`` the direction is Adam's
    ``m_hat / (sqrt(v_hat) + eps)`` with ``m_hat = m / (1 - b1^t)``,
    ``v_hat = v / (1 - b2^t)`` (t = 1, 2, ...): the AdamW of Hugging Face /
    torch (``w *= 1 - lr * wd`` then the Adam step, which is the same
    ``w -= lr * (u + wd * w)``), keras-hub and Model Garden. Its first step
    is ``lr * g / (|g| + eps)``, about ``lr`` per weight, where the original's
    is ``lr * (1 - b1) / sqrt(1 - b2)`` ~ 3.2 ``lr``.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`.
        weight_decay_rate: decoupled weight decay added to the update.
        beta_1: first-moment decay.
        beta_2: second-moment decay.
        epsilon: added to sqrt(v).
        exclude_from_weight_decay: regexes searched in `variable.path`.
        global_clipnorm: clip the all-reduced gradients to this global norm
            (None: no clipping).
        name: optimizer name.
        lr_multipliers: variable path -> factor on the learning rate (see
            `layerwise_lr_multipliers`); other variables get 1.
        bias_correction: Adam's bias correction of m and v (False: the
            original's maths; `albert_tf.optimizers.adamw` defaults to True).
        **kwargs: other `keras.optimizers.Optimizer` arguments (not
            weight_decay / clipnorm / clipvalue / gradient_accumulation_steps).

    Example:

    >>> opt = AdamWeightDecay(learning_rate=0.1)
    >>> w = keras.Variable([1.0], name="kernel")
    >>> _ = opt.apply_gradients([(tf.constant([2.0]), w)])
    >>> round(float(w.numpy()[0]), 4)  # 1 - 0.1 * (0.2 / (0.063246+1e-6) + 0.01)
    0.6828
    >>> opt = AdamWeightDecay(learning_rate=0.1, bias_correction=True)
    >>> w = keras.Variable([1.0], name="kernel")
    >>> _ = opt.apply_gradients([(tf.constant([2.0]), w)])
    >>> round(float(w.numpy()[0]), 4)  # 1 - 0.1 * (2 / (2 + 1e-6) + 0.01)
    0.899
    """


@keras.saving.register_keras_serializable(package="albert_tf")
class Lamb(_AlbertAdamBase):
    """The original ALBERT LAMB (`lamb_optimizer.LAMBOptimizer`).

    The AdamW update ``u`` (no bias correction, weight decay added), then for
    variables not excluded from layer adaptation the trust ratio
    ``r = ||w|| / ||u||`` (1 if either norm is 0): ``w -= r * lr * u``.

    Args:
        learning_rate: float or `keras.optimizers.schedules.LearningRateSchedule`.
        weight_decay_rate: decoupled weight decay added to the update.
        beta_1: first-moment decay.
        beta_2: second-moment decay.
        epsilon: added to sqrt(v).
        exclude_from_weight_decay: regexes searched in `variable.path`.
        exclude_from_layer_adaptation: regexes for variables that get r = 1;
            None means the weight-decay exclusions (as the original).
        global_clipnorm: clip the all-reduced gradients to this global norm.
        name: optimizer name.
        **kwargs: other `keras.optimizers.Optimizer` arguments.

    Example:

    >>> opt = Lamb(learning_rate=0.1)
    >>> w = keras.Variable([3.0, 4.0], name="kernel")
    >>> _ = opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
    >>> [round(float(x), 4) for x in w.numpy()]  # the step has norm lr*||w||
    [2.647, 3.6459]
    """

    _use_layer_adaptation = True

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay_rate: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] | None = (
            DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY),
        exclude_from_layer_adaptation: Sequence[str] | None = None,
        global_clipnorm: float | None = None,
        name: str | None = None,
        **kwargs,
    ):
        super().__init__(
            learning_rate=learning_rate,
            weight_decay_rate=weight_decay_rate,
            beta_1=beta_1,
            beta_2=beta_2,
            epsilon=epsilon,
            exclude_from_weight_decay=exclude_from_weight_decay,
            global_clipnorm=global_clipnorm,
            name=name,
            **kwargs,
        )
        self.exclude_from_layer_adaptation = (
            list(exclude_from_layer_adaptation)
            if exclude_from_layer_adaptation is not None else None)

    def _layer_adaptation_exclusions(self):
        if self.exclude_from_layer_adaptation is not None:
            return self.exclude_from_layer_adaptation
        return self.exclude_from_weight_decay

    def get_config(self) -> dict:
        config = super().get_config()
        config["exclude_from_layer_adaptation"] = (
            self.exclude_from_layer_adaptation)
        return config


def create_optimizer(
    name: str,
    learning_rate,
    *,
    weight_decay_rate: float = 0.01,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-6,
    global_clipnorm: float | None = 1.0,
) -> _AlbertAdamBase:
    """Returns the original's "lamb" or "adamw" with its defaults.

    Args:
        name: "lamb" or "adamw".
        learning_rate: float or schedule (see `WarmupPolynomialDecay`).
        weight_decay_rate: 0.01 in the original.
        beta_1: 0.9 in the original.
        beta_2: 0.999 in the original.
        epsilon: 1e-6 in the original.
        global_clipnorm: 1.0 in the original; None disables clipping.

    Example:

    >>> create_optimizer("adamw", 1e-3).global_clipnorm
    1.0
    """
    classes = {"lamb": Lamb, "adamw": AdamWeightDecay}
    if name not in classes:
        raise ValueError(
            f"Unknown optimizer {name!r}; expected one of {sorted(classes)}.")
    return classes[name](
        learning_rate=learning_rate,
        weight_decay_rate=weight_decay_rate,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        global_clipnorm=global_clipnorm,
    )


def layerwise_depths(model) -> tuple[dict, int]:
    """The depth of every trainable variable for layer-wise learning-rate decay.

    Depth counts parameter *sets* along the stack, not applications of them,
    so that sharing does not multiply the decay:

    * 0: the embeddings (word, position, type tables, their LayerNorm) and
      the E -> H projection;
    * 1 .. P: the transformer, where P = max(attention groups, FFN groups):
      G for sharing "all" (the original: P = 1, the whole shared layer is
      depth 1), L for "none", "attention" and "ffn". A parameter group used
      by layers S has the level of the last layer in S (mapped to 1..P), so
      a group shared across every layer sits at the top of the stack;
    * P + 1: everything else: the pooler and the task head.

    Args:
        model: a model with an `.encoder` (AlbertEncoder), or the encoder.

    Returns:
        ({variable path: depth}, P + 1 = the head's depth).
    """
    from albert_tf.layers.transformer_stack import group_for_layer

    encoder = getattr(model, "encoder", model)
    config = encoder.config
    num_layers = config.num_hidden_layers
    stack = encoder.transformer
    levels = max(len(stack.attention_groups), len(stack.ffn_groups))
    top = levels + 1
    depths = {_variable_name(v): top for v in model.trainable_variables}
    bottom = list(encoder.embeddings.trainable_variables)
    if encoder.embedding_projection is not None:
        bottom += list(encoder.embedding_projection.trainable_variables)
    for var in bottom:
        depths[_variable_name(var)] = 0
    for groups in (stack.attention_groups, stack.ffn_groups):
        for g, group in enumerate(groups):
            last = max(layer for layer in range(num_layers)
                       if group_for_layer(layer, num_layers, len(groups)) == g)
            level = 1 + (last * levels) // num_layers
            for block in group:
                for var in block.trainable_variables:
                    depths[_variable_name(var)] = level
    return depths, top


def layerwise_lr_multipliers(model, decay: float) -> dict:
    """{variable path: decay ** (head depth - depth)} (see `layerwise_depths`).

    The head gets the full rate; with the original all-shared ALBERT the
    shared transformer layer gets `decay` and the embeddings `decay ** 2`.

    Example:
    >>> import albert_tf
    >>> clf = albert_tf.AlbertClassifier(albert_tf.AlbertConfig.tiny(), num_classes=2)
    >>> m = layerwise_lr_multipliers(clf, 0.5)
    >>> sorted(set(m.values()))
    [0.25, 0.5, 1.0]
    """
    if not 0.0 < float(decay) <= 1.0:
        raise ValueError(f"layerwise_lr_decay must be in (0, 1], got {decay!r}.")
    depths, top = layerwise_depths(model)
    return {name: float(decay) ** (top - depth) for name, depth in depths.items()}
