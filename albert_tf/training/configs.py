"""The settings of a training run, grouped: optimization, runtime, data.

The binaries fill them once from their flags (`Config.from_flags(FLAGS)`: each
field reads the flag of the same name) and hand them to the library; the demo
and fine-tuning build them in code. Defaults are the original
run_pretraining.py's (reference §1).

Example:

>>> opt = OptimizationConfig(train_batch_size=8, num_train_steps=3,
...                          num_warmup_steps=1)
>>> opt.validate(num_replicas=2)
>>> opt.micro_batch_size(num_replicas=2)
4
>>> RuntimeConfig().mixed_precision, PretrainingDataConfig().max_eval_steps
('float32', 100)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from albert_tf import runtime


class _FromFlags:
    """`from_flags`: each field takes the value of the flag of its name."""

    @classmethod
    def from_flags(cls, flag_values: Any, **overrides: Any):
        """Builds the config from parsed absl flags.

        Args:
            flag_values: `absl.flags.FLAGS` (or any object with the fields as
                attributes); fields without a flag of their name keep their
                defaults.
            **overrides: values that win over the flags.
        """
        values = {}
        for field in dataclasses.fields(cls):
            try:
                values[field.name] = getattr(flag_values, field.name)
            except AttributeError:
                continue  # no such flag in this binary: the default
        values.update(overrides)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class OptimizationConfig(_FromFlags):
    """What one optimizer step is and how the weights move.

    Attributes:
        train_batch_size: global batch = per-replica micro-batch x replicas x
            gradient_accumulation_steps.
        num_train_steps: optimizer steps (also the decay horizon).
        optimizer: "lamb" or "adamw" (`albert_tf.optimization`).
        learning_rate: peak learning rate.
        num_warmup_steps: linear warmup steps.
        start_warmup_step: the step warmup counts from.
        poly_power: power of the polynomial decay.
        weight_decay_rate: decoupled weight decay.
        clip_norm: global-norm clipping of the global-batch gradient (0: off).
        gradient_accumulation_steps: micro-batches per step.
    """

    train_batch_size: int = 4096
    num_train_steps: int = 125000
    optimizer: str = "lamb"
    learning_rate: float = 0.00176
    num_warmup_steps: int = 3125
    start_warmup_step: int = 0
    poly_power: float = 1.0
    weight_decay_rate: float = 0.01
    clip_norm: float = 1.0
    gradient_accumulation_steps: int = 1

    def validate(self, num_replicas: int = 1) -> None:
        """ValueError naming the setting when the batch does not split evenly."""
        accum = self.gradient_accumulation_steps
        if accum < 1:
            raise ValueError(
                f"gradient_accumulation_steps must be >= 1, got {accum}.")
        if (self.train_batch_size <= 0
                or self.train_batch_size % (num_replicas * accum)):
            raise ValueError(
                f"train_batch_size={self.train_batch_size} must be a positive "
                "multiple of replicas x gradient_accumulation_steps = "
                f"{num_replicas} x {accum}.")
        if self.num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be positive, got "
                             f"{self.num_train_steps}.")

    def micro_batch_size(self, num_replicas: int = 1) -> int:
        """Examples one replica computes at once."""
        return self.train_batch_size // (num_replicas *
                                         self.gradient_accumulation_steps)

    def create_schedule(self):
        """The original's warmup + polynomial decay over num_train_steps."""
        from albert_tf import optimization

        return optimization.WarmupPolynomialDecay(
            self.learning_rate, decay_steps=self.num_train_steps,
            warmup_steps=self.num_warmup_steps, power=self.poly_power,
            start_warmup_step=self.start_warmup_step)

    def create_optimizer(self, schedule=None):
        """LAMB or AdamW with the original's exclusions, on `schedule`."""
        from albert_tf import optimization

        return optimization.create_optimizer(
            self.optimizer, schedule or self.create_schedule(),
            weight_decay_rate=self.weight_decay_rate,
            global_clipnorm=self.clip_norm or None)


@dataclasses.dataclass(frozen=True)
class RuntimeConfig(_FromFlags):
    """How the run computes, saves and reports (not what it learns).

    Attributes:
        mixed_precision: "auto", "float32", "bfloat16" or "float16" (float16
            adds dynamic loss scaling); "auto" is resolved by
            `albert_tf.runtime.resolve_mixed_precision`.
        jit_compile: XLA-compile forward and backward passes.
        jit_whole_step: XLA-compile the whole replica step as one program:
            forward, backward, gradient accumulation, loss scaling, the
            non-finite guard, the all-reduce, clipping and the optimizer
            update (what TPUStrategy compiles). Implies jit_compile.
        save_checkpoints_steps: checkpoint interval in steps.
        keep_checkpoint_max: checkpoints kept.
        log_steps: log/summary interval in steps.
        seed: seeds weight initialisation and dropout.
        max_train_seconds: stop (with a checkpoint) once training has run
            this long, even before num_train_steps; the schedule still decays
            over num_train_steps. Multi-worker runs check it every log_steps.
    """

    mixed_precision: str = "float32"
    jit_compile: bool = False
    jit_whole_step: bool = False
    save_checkpoints_steps: int = 5000
    keep_checkpoint_max: int = 5
    log_steps: int = 100
    seed: int = 12345
    max_train_seconds: Optional[float] = None

    def resolved_precision(self) -> str:
        """mixed_precision with "auto" resolved for this machine."""
        return runtime.resolve_mixed_precision(self.mixed_precision)


ON_NONFINITE_CHOICES = ("stop", "rollback")
# The loss window that a saved run carries (`healing.RecoveryState`); a larger
# --loss_spike_window would change the checkpoint's shape.
MAX_LOSS_SPIKE_WINDOW = 1000


@dataclasses.dataclass(frozen=True)
class RecoveryConfig(_FromFlags):
    """What the loop does when training diverges (`albert_tf.training.healing`).

    Attributes:
        on_nonfinite: "stop" (a non-finite loss ends the run with one line
            naming the last good checkpoint) or "rollback" (a non-finite loss
            or a loss spike restores the last checkpoint, skips the data read
            since and goes on).
        loss_spike_factor: with rollback, a finite loss above this many times
            the median of the last `loss_spike_window` losses is a spike
            (0: only non-finite losses count).
        loss_spike_window: recent losses the median is taken over; spikes are
            looked for once that many steps have been seen.
        rollback_learning_rate_factor: each rollback multiplies the learning
            rate by this (1: the schedule is kept).
        max_rollbacks: rollbacks allowed in the run; the next event ends it.
    """

    on_nonfinite: str = "stop"
    loss_spike_factor: float = 2.0
    loss_spike_window: int = 100
    rollback_learning_rate_factor: float = 1.0
    max_rollbacks: int = 3

    @property
    def rollback(self) -> bool:
        return self.on_nonfinite == "rollback"

    def validate(self) -> None:
        """ValueError quoting the first bad setting.

        >>> RecoveryConfig(loss_spike_window=0).validate()
        Traceback (most recent call last):
        ...
        ValueError: loss_spike_window must be in [1, 1000], got 0.
        """
        if self.on_nonfinite not in ON_NONFINITE_CHOICES:
            raise ValueError(f"on_nonfinite must be one of {ON_NONFINITE_CHOICES}, "
                             f"got {self.on_nonfinite!r}.")
        if not 1 <= self.loss_spike_window <= MAX_LOSS_SPIKE_WINDOW:
            raise ValueError(f"loss_spike_window must be in [1, {MAX_LOSS_SPIKE_WINDOW}], "
                             f"got {self.loss_spike_window}.")
        if self.loss_spike_factor != 0 and not self.loss_spike_factor > 1:
            raise ValueError("loss_spike_factor must be above 1 (or 0: no spike detection), "
                             f"got {self.loss_spike_factor}.")
        if not 0 < self.rollback_learning_rate_factor <= 1:
            raise ValueError("rollback_learning_rate_factor must be in (0, 1], "
                             f"got {self.rollback_learning_rate_factor}.")
        if self.max_rollbacks < 0:
            raise ValueError(f"max_rollbacks must be >= 0, got {self.max_rollbacks}.")


@dataclasses.dataclass(frozen=True)
class PretrainingDataConfig(_FromFlags):
    """The pretraining data and its evaluation.

    Attributes:
        max_seq_length: the shards' sequence length; checked against the data
            (and recorded for resume) when given.
        max_predictions_per_seq: masked positions per sequence; idem.
        max_eval_steps: evaluation batches at most.
        input_file: training shards (a glob or comma-separated globs), for
            the binaries that build the dataset.
        eval_input_file: evaluation shards (default: input_file).
        masking: "static" (the shards' masks) or "dynamic".
        masked_lm_prob: dynamic masking's fraction of masked tokens; above
            the shards' own rate each training row gets more masked positions
            (`pipelines.tfrecords.dynamic_predictions_per_seq`).
        eval_batch_size: global evaluation batch.
        data_service_address: a tf.data service dispatcher, grpc://HOST:PORT:
            the training input runs on its workers (`training.data_service`;
            the dataset_fn must then not shard by input context). Resume is
            not exact with it (`data_service.RESUME_NOTE`). Evaluation stays
            local.
    """

    max_seq_length: Optional[int] = None
    max_predictions_per_seq: Optional[int] = None
    max_eval_steps: int = 100
    input_file: Optional[str] = None
    eval_input_file: Optional[str] = None
    masking: str = "static"
    masked_lm_prob: float = 0.15
    eval_batch_size: int = 64
    data_service_address: Optional[str] = None

    def train_predictions_per_seq(self) -> Optional[int]:
        """Masked positions per training row: the shards' count, or more
        under dynamic masking at a higher `masked_lm_prob`.

        >>> PretrainingDataConfig(max_seq_length=128, max_predictions_per_seq=20,
        ...                       masking="dynamic", masked_lm_prob=0.4).train_predictions_per_seq()
        51
        """
        if self.masking != "dynamic" or not self.max_seq_length or not self.max_predictions_per_seq:
            return self.max_predictions_per_seq
        from pipelines.tfrecords import dynamic_predictions_per_seq

        return dynamic_predictions_per_seq(self.max_seq_length, self.max_predictions_per_seq,
                                           self.masked_lm_prob)
