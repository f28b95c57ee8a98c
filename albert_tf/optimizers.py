"""Optimizers for fine-tuning and pretraining.

`adamw(...)` is the fine-tuning optimizer: AdamW with Adam's bias correction
(as Hugging Face / torch, keras-hub and Model Garden; the original
run_classifier / run_squad / run_race's AdamW without it is
``adamw(..., bias_correction=False)``), weight decay 0.01 except LayerNorm and
bias variables, gradients clipped to a global norm of 1.0, and a linear warmup
then linear decay to 0 over `num_train_steps`; optionally layer-wise
learning-rate decay. See `albert_tf.optimization` for the maths.

Without bias correction the first steps are about (1 - b1) / sqrt(1 - b2)
~ 3.2 times the nominal rate, which at the rates small models need collapses
fine-tuning onto the class prior (issue 15's measurements).

Example:

>>> import albert_tf
>>> opt = albert_tf.optimizers.adamw(3e-5, num_train_steps=1000, warmup_proportion=0.1)
>>> opt.weight_decay_rate, opt.global_clipnorm, opt.exclude_from_weight_decay, opt.bias_correction
(0.01, 1.0, ['LayerNorm', 'layer_norm', 'bias'], True)
"""

from __future__ import annotations

from typing import Optional

from albert_tf.optimization import (AdamWeightDecay, Lamb, WarmupPolynomialDecay, create_optimizer,
                                    layerwise_depths, layerwise_lr_multipliers)

__all__ = ["adamw", "AdamWeightDecay", "Lamb", "WarmupPolynomialDecay", "create_optimizer",
           "layerwise_depths", "layerwise_lr_multipliers", "linear_warmup_decay"]


def linear_warmup_decay(learning_rate: float, num_train_steps: int, warmup_proportion: float = 0.1,
                        num_warmup_steps: Optional[int] = None,
                        decay_after_warmup: bool = False) -> WarmupPolynomialDecay:
    """Linear warmup over int(num_train_steps * warmup_proportion) steps, then linear decay to 0.

    decay_after_warmup=False is the original's schedule (the decay counts from
    step 0, so the rate drops to lr * (1 - warmup / total) when warmup ends);
    True reaches the peak and decays over the remaining steps (Hugging Face's
    `get_linear_schedule_with_warmup`).

    Example:
    >>> s = linear_warmup_decay(1.0, num_train_steps=100, warmup_proportion=0.1)
    >>> [round(float(s(i)), 3) for i in (0, 5, 10, 55, 100)]
    [0.0, 0.5, 0.9, 0.45, 0.0]
    >>> s = linear_warmup_decay(1.0, num_train_steps=100, warmup_proportion=0.1, decay_after_warmup=True)
    >>> [round(float(s(i)), 3) for i in (0, 5, 10, 55, 100)]
    [0.0, 0.5, 1.0, 0.5, 0.0]
    """
    if int(num_train_steps) <= 0:
        raise ValueError(f"num_train_steps must be positive, got {num_train_steps!r}.")
    if not 0.0 <= float(warmup_proportion) <= 1.0:
        raise ValueError(f"warmup_proportion must be in [0, 1], got {warmup_proportion!r}.")
    if num_warmup_steps is None:
        num_warmup_steps = int(num_train_steps * warmup_proportion)
    return WarmupPolynomialDecay(learning_rate, decay_steps=int(num_train_steps),
                                 warmup_steps=int(num_warmup_steps), power=1.0,
                                 decay_after_warmup=decay_after_warmup)


# adamw's epsilon by bias correction: torch's AdamW default / the original's.
DEFAULT_EPSILON = {True: 1e-8, False: 1e-6}


def adamw(learning_rate: float = 3e-5, *, num_train_steps: Optional[int] = None, warmup_proportion: float = 0.1,
          num_warmup_steps: Optional[int] = None, weight_decay_rate: float = 0.01, beta_1: float = 0.9,
          beta_2: float = 0.999, epsilon: Optional[float] = None, global_clipnorm: Optional[float] = 1.0,
          layerwise_lr_decay: Optional[float] = None, model=None,
          bias_correction: bool = True, decay_after_warmup: bool = False) -> AdamWeightDecay:
    """Fine-tuning AdamW (bias-corrected by default) with the original's schedule.

    Args:
        learning_rate: the peak learning rate.
        num_train_steps: total optimizer steps; with it the rate warms up
            linearly and decays linearly to 0 (`linear_warmup_decay`);
            without it the rate is constant.
        warmup_proportion: the share of num_train_steps spent warming up.
        num_warmup_steps: overrides warmup_proportion.
        weight_decay_rate: decoupled weight decay (not on LayerNorm or bias).
        beta_1, beta_2: Adam's.
        epsilon: added to Adam's sqrt(v). None: 1e-8 with bias correction
            (torch's and Hugging Face's AdamW; with 1e-6 a small model's
            small gradients take damped steps: bench/studies/README.md, fine-tuning parity),
            1e-6 without it (the original's).
        global_clipnorm: clip of the global gradient norm (None: off).
        layerwise_lr_decay: e.g. 0.8: the head keeps the rate, each level below
            is multiplied by this factor (`layerwise_lr_multipliers`); needs
            `model`.
        model: the task model (or encoder) whose variables get the factors.
        bias_correction: True: Adam's bias-corrected moments (Hugging Face's
            AdamW); False: the original ALBERT's AdamW maths exactly
            (albert-finetune --optimizer=adamw_original).

    Returns:
        An `AdamWeightDecay` to pass to `model.compile(optimizer=...)`.

    Example:
    >>> opt = adamw(2e-5, num_train_steps=100)
    >>> round(float(opt.learning_rate), 7)  # step 0 of the warmup
    0.0
    """
    if epsilon is None:
        epsilon = DEFAULT_EPSILON[bool(bias_correction)]
    if not float(epsilon) > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon!r}.")
    rate = learning_rate
    if num_train_steps is not None:
        rate = linear_warmup_decay(learning_rate, num_train_steps, warmup_proportion, num_warmup_steps,
                                   decay_after_warmup=decay_after_warmup)
    multipliers = None
    if layerwise_lr_decay is not None and float(layerwise_lr_decay) != 1.0:
        if model is None:
            raise ValueError(f"layerwise_lr_decay={layerwise_lr_decay!r} needs model= (the task model) to "
                             "know each variable's depth.")
        multipliers = layerwise_lr_multipliers(model, layerwise_lr_decay)
    optimizer = AdamWeightDecay(learning_rate=rate, weight_decay_rate=weight_decay_rate, beta_1=beta_1,
                                beta_2=beta_2, epsilon=epsilon, global_clipnorm=global_clipnorm,
                                lr_multipliers=multipliers, bias_correction=bias_correction)
    return optimizer
