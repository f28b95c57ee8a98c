"""The demo's settings: one dataclass, whose defaults are albert-demo's flag defaults.

The binary (albert_tf/bin/demo.py) defines one flag per field with the field's
default and builds a `DemoSettings` from the parsed flags; the stages read
only this object, so the package defines no flags and its functions run in any
process (the tests, a notebook).

Example:

>>> settings = DemoSettings(output_dir="out", pretrain_steps=30)
>>> settings.pretrain_steps, settings.max_seq_length, settings.warmup_steps_for_budget()
(30, 64, 3)
"""

from __future__ import annotations

import dataclasses
from typing import Optional

MAX_PREDICTIONS_PER_SEQ = 10  # round(64 * 0.15); longer sequences cap at 15% as well
HELDOUT_FRACTION = 0.05  # documents held out for evaluation
STAGES = 8


@dataclasses.dataclass(frozen=True)
class DemoSettings:
    """What albert-demo does, field by field its flag of the same name.

    Attributes:
        output_dir: where every stage writes its results.
        pretrain_steps: pretraining steps (a step budget, not a time budget).
        minutes: safety cap on pretraining wall time.
        input_file: the user's corpus (globs, comma-separated) instead of the
            standard library's docstrings.
        vocab_size: SentencePiece vocabulary size (an upper bound).
        max_seq_length: tokens per training sequence.
        train_batch_size: sequences per pretraining step.
        dupe_factor: passes over the corpus with fresh masks and pairings.
        learning_rate: peak LAMB rate (flags/recipes/small_pretrain.cfg).
        warmup_steps: linear warmup steps (at most a tenth of the budget).
        masked_lm_prob: share of tokens masked afresh in each pass (dynamic masking).
        random_seed: seed of every random choice.
        finetune_train_examples / finetune_dev_examples: size of the task.
        finetune_epochs, finetune_learning_rate, finetune_pooling,
        finetune_warmup_proportion, finetune_batch_size: the fine-tuning
            budget, the same for the pretrained and the random-weights run.
        mixed_precision: auto, float32 or bfloat16.
    """

    output_dir: str = "demo_output"
    pretrain_steps: int = 1500
    minutes: float = 25.0
    input_file: Optional[str] = None
    vocab_size: int = 6000
    max_seq_length: int = 64
    train_batch_size: int = 64
    dupe_factor: int = 6
    learning_rate: float = 0.01
    warmup_steps: int = 100
    masked_lm_prob: float = 0.4
    random_seed: int = 12345
    finetune_train_examples: int = 3000
    finetune_dev_examples: int = 600
    # flags/recipes/small_finetune.cfg's optimizer and pooling, at batch 32 and 4 epochs (375 steps a run,
    # against the recipe's 940 at batch 16 and 5 epochs) to fit two runs in the demo's budget; at batch 32
    # the recipe's grid found 1e-3 the best rate (bench/results/demo_quality.md).
    finetune_epochs: float = 4.0
    finetune_learning_rate: float = 1e-3
    finetune_pooling: str = "mean"
    finetune_warmup_proportion: float = 0.1
    finetune_batch_size: int = 32
    mixed_precision: str = "auto"

    def warmup_steps_for_budget(self) -> int:
        """The warmup actually used: `warmup_steps`, at most a tenth of the step budget."""
        return min(self.warmup_steps, self.pretrain_steps // 10)

    @classmethod
    def from_flags(cls, flag_values) -> "DemoSettings":
        """The settings from parsed absl flags named like the fields."""
        return cls(**{f.name: getattr(flag_values, f.name) for f in dataclasses.fields(cls)})
