"""Fine-tuning defaults chosen by the size of the model they train.

albert-finetune's fixed defaults (AdamW, lr 3e-5, the pooled [CLS] head, batch
32, 3 epochs) are the recipe of ALBERT-base (hidden size 768). On a small
model they learn nothing: the demo's model (hidden size 128, 611k parameters)
stays at the class prior on its topic task (issue 35). A model of hidden size
at most `SMALL_MODEL_MAX_HIDDEN_SIZE` therefore gets the values of
flags/recipes/small_finetune.cfg, measured to learn on such models
(bench/results/finetune_small_recipe.md), for every one of these settings the
user did not give; a given flag always wins. The runner says which values it
took and why in one log line, and records the resolved values in the run
settings (`albert_tf.tasks.run_state`), so a resume compares what was used.

Hidden size, not parameter count, draws the line: the vocabulary's embedding
table holds most of a small model's parameters (the demo's: 384k of 611k)
and says nothing about the rates the encoder trains at. The published
ALBERT sizes start at 768 (base); the recipe's grid ran at 128 and its
header claims it up to about 256.

Example:
>>> from albert_tf.config import AlbertConfig
>>> is_small_model(AlbertConfig.tiny()), is_small_model(AlbertConfig.from_preset("albert_base_v2"))
(True, False)
>>> sorted(k for k in SMALL_MODEL_DEFAULTS if SMALL_MODEL_DEFAULTS[k] != BASE_DEFAULTS[k])
['learning_rate', 'num_train_epochs', 'pooling', 'train_batch_size']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from absl import logging

if TYPE_CHECKING:
    from albert_tf.config import AlbertConfig
    from albert_tf.tasks.runner import FinetuneOptions

SMALL_MODEL_MAX_HIDDEN_SIZE = 256
SMALL_RECIPE = "flags/recipes/small_finetune.cfg"

# albert-finetune's defaults for a model of ALBERT-base's size or larger (the flags' own defaults).
BASE_DEFAULTS: Dict[str, Any] = {"optimizer": "adamw", "pooling": "pooled", "learning_rate": 3e-5,
                                 "train_batch_size": 32, "num_train_epochs": 3.0, "warmup_proportion": 0.1}
# flags/recipes/small_finetune.cfg, value for value (tests/albert_tf/tasks/test_size_defaults.py reads the file).
SMALL_MODEL_DEFAULTS: Dict[str, Any] = {"optimizer": "adamw", "pooling": "mean", "learning_rate": 5e-4,
                                        "train_batch_size": 16, "num_train_epochs": 5.0, "warmup_proportion": 0.1}
# The settings that depend on the model's size: FinetuneOptions' names (pooling is TaskOptions').
SIZE_DEPENDENT = tuple(BASE_DEFAULTS)


def is_small_model(config: AlbertConfig) -> bool:
    """Whether `config` gets the small model's defaults (hidden size at most `SMALL_MODEL_MAX_HIDDEN_SIZE`).

    Args:
        config: the model's `AlbertConfig`.
    """
    return config.hidden_size <= SMALL_MODEL_MAX_HIDDEN_SIZE


def flags_text(values: Dict[str, Any]) -> str:
    """The settings as command-line flags.

    >>> flags_text({"learning_rate": 5e-4, "pooling": "mean", "num_train_epochs": 5.0})
    '--learning_rate=0.0005 --pooling=mean --num_train_epochs=5'
    """
    return " ".join(f"--{name}={value:g}" if isinstance(value, float) else f"--{name}={value}"
                    for name, value in values.items())


def _set(options: FinetuneOptions, name: str, value: Any) -> None:
    holder = options.task_options if name == "pooling" else options
    setattr(holder, name, value)


def apply_size_defaults(options: FinetuneOptions, config: AlbertConfig) -> Dict[str, Any]:
    """Gives the settings the user left at their defaults (`options.defaulted`) the values for the model's size.

    A small model (`is_small_model`) gets `SMALL_MODEL_DEFAULTS` for each name in `options.defaulted`,
    said in one INFO line naming the values and why; a larger model keeps `BASE_DEFAULTS`. Settings the
    user gave (not in `options.defaulted`) are never changed.

    Args:
        options: the run's options; changed in place (`pooling` in `options.task_options`).
        config: the config of the model to fine-tune.

    Returns:
        name -> value of the settings changed (empty when none).

    Example:
    >>> from albert_tf.config import AlbertConfig
    >>> from albert_tf.tasks.runner import FinetuneOptions
    >>> o = FinetuneOptions("csv", "d", "o", learning_rate=1e-3, defaulted=SIZE_DEPENDENT[:1] + ("pooling",))
    >>> apply_size_defaults(o, AlbertConfig.tiny()), o.learning_rate, o.task_options.pooling
    ({'pooling': 'mean'}, 0.001, 'mean')
    """
    if not is_small_model(config):
        return {}
    changed = {name: SMALL_MODEL_DEFAULTS[name] for name in SIZE_DEPENDENT
               if name in options.defaulted and SMALL_MODEL_DEFAULTS[name] != BASE_DEFAULTS[name]}
    for name, value in changed.items():
        _set(options, name, value)
    if changed:
        logging.info(
            "Small model (hidden size %d <= %d): %s, the values of %s for the flags not given (ALBERT-base's "
            "defaults %s learn nothing at this size); a flag you give wins.", config.hidden_size,
            SMALL_MODEL_MAX_HIDDEN_SIZE, flags_text(changed), SMALL_RECIPE,
            flags_text({name: BASE_DEFAULTS[name] for name in changed}))
    return changed
