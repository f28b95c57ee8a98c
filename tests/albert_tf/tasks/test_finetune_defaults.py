"""Fine-tuning defaults by the model's size (albert_tf/finetune_defaults.py): which flags count as given, what a
small model gets instead, that a given flag wins, and that a resume compares the resolved values.

The end-to-end proof that the defaults learn is tests/albert_tf/test_newcomer_finetune.py (README's command on a
model of the demo's config); these tests are in-process and build no model.
"""

import logging
import os

import pytest
from absl import flags

from albert_tf.config import AlbertConfig
from albert_tf.finetune_defaults import (BASE_DEFAULTS, SIZE_DEPENDENT, SMALL_MODEL_DEFAULTS, apply_size_defaults,
                                         is_small_model)

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RECIPE = os.path.join(ROOT, "flags", "recipes", "small_finetune.cfg")


def _options(*argv):
    """albert-finetune's options for these flags (the others not given)."""
    from albert_tf.bin import finetune

    finetune._define_flags()
    FLAGS.unparse_flags()
    FLAGS(["albert-finetune", "--task=csv", "--data_dir=d", "--output_dir=o", *argv])
    try:
        return finetune.options_from_flags()
    finally:
        FLAGS.unparse_flags()


def _values(options):
    return {name: getattr(options.task_options if name == "pooling" else options, name) for name in SIZE_DEPENDENT}


def test_small_defaults_are_the_measured_recipe_file():
    given = {}
    with open(RECIPE, encoding="utf-8") as f:
        for line in f:
            if line.startswith("--"):
                name, value = line.strip()[2:].split("=", 1)
                given[name] = value
    assert set(given) == set(SMALL_MODEL_DEFAULTS)
    for name, value in SMALL_MODEL_DEFAULTS.items():
        assert type(value)(given[name]) == value, name


def test_the_line_is_drawn_at_hidden_size_256():
    assert is_small_model(AlbertConfig.tiny(hidden_size=256, intermediate_size=1024, num_attention_heads=4))
    assert not is_small_model(AlbertConfig.tiny(hidden_size=264, intermediate_size=1024, num_attention_heads=4))
    assert not is_small_model(AlbertConfig.from_preset("albert_base_v2"))


def test_flags_not_given_are_the_base_defaults_marked_for_the_model_to_decide():
    options = _options()
    assert options.defaulted == SIZE_DEPENDENT
    assert _values(options) == BASE_DEFAULTS
    options = _options("--learning_rate=1e-3", "--pooling=pooled")
    assert set(options.defaulted) == set(SIZE_DEPENDENT) - {"learning_rate", "pooling"}
    assert options.learning_rate == 1e-3 and options.task_options.pooling == "pooled"
    # A flag given at its default value is given: it wins on a small model too.
    assert "train_batch_size" not in _options("--train_batch_size=32").defaulted
    # The recipe's flagfile gives every one of them.
    assert _options(f"--flagfile={RECIPE}").defaulted == ()


def test_a_small_model_gets_the_recipe_for_what_is_not_given_in_one_line(caplog):
    small = AlbertConfig.tiny(hidden_size=128, intermediate_size=512)
    options = _options()
    with caplog.at_level(logging.INFO, logger="absl"):
        changed = apply_size_defaults(options, small)
    assert _values(options) == SMALL_MODEL_DEFAULTS
    assert changed == {"pooling": "mean", "learning_rate": 5e-4, "train_batch_size": 16, "num_train_epochs": 5.0}
    lines = [r.getMessage() for r in caplog.records if "Small model" in r.getMessage()]
    assert lines == ["Small model (hidden size 128 <= 256): --pooling=mean --learning_rate=0.0005 "
                     "--train_batch_size=16 --num_train_epochs=5, the values of flags/recipes/small_finetune.cfg "
                     "for the flags not given (ALBERT-base's defaults --pooling=pooled --learning_rate=3e-05 "
                     "--train_batch_size=32 --num_train_epochs=3 learn nothing at this size); a flag you give wins."]

    given = _options("--learning_rate=2e-3", "--pooling=pooled", "--num_train_epochs=1")
    assert apply_size_defaults(given, small) == {"train_batch_size": 16}
    assert (given.learning_rate, given.task_options.pooling, given.num_train_epochs) == (2e-3, "pooled", 1.0)

    caplog.clear()
    everything = _options(f"--flagfile={RECIPE}", "--learning_rate=1e-3")
    with caplog.at_level(logging.INFO, logger="absl"):
        assert apply_size_defaults(everything, small) == {}
    assert not [r for r in caplog.records if "Small model" in r.getMessage()]  # nothing replaced, nothing said
    assert everything.learning_rate == 1e-3


def test_a_base_sized_model_keeps_the_base_defaults():
    options = _options()
    assert apply_size_defaults(options, AlbertConfig.from_preset("albert_base_v2")) == {}
    assert _values(options) == BASE_DEFAULTS


def test_python_options_are_used_as_given():
    """FinetuneOptions made in Python (the demo, the benchmarks) mark nothing defaulted: nothing changes."""
    from albert_tf.tasks.runner import FinetuneOptions

    options = FinetuneOptions("csv", "d", "o")
    assert apply_size_defaults(options, AlbertConfig.tiny()) == {}
    assert _values(options) == BASE_DEFAULTS


def test_a_resume_compares_the_resolved_values(tmp_path):
    """The run settings hold what was used: the same command resolves the same values and resumes; the base
    defaults given explicitly are another run."""
    from albert_tf.tasks import get_task
    from albert_tf.tasks.run_state import check_run_state, run_settings
    from albert_tf.tasks.runner import training_schedule

    small = AlbertConfig.tiny(hidden_size=128, intermediate_size=512)

    def settings(*argv):
        options = _options(f"--output_dir={tmp_path}", "--do_train", *argv)
        apply_size_defaults(options, small)
        task = get_task(options.task, options.task_options)
        return options, run_settings(options, task, training_schedule(320, options), "float32")

    options, first = settings()
    assert (first["learning_rate"], first["train_batch_size"], first["pooling"]) == (5e-4, 16, "mean")
    assert first["total_steps"] == 100  # int(320 / 16 * 5)
    check_run_state(options, first)  # records it
    check_run_state(*settings())  # the same command
    check_run_state(*settings(f"--flagfile={RECIPE}"))  # the same values, given
    with pytest.raises(ValueError, match=r"learning_rate: 0\.0005 there, 3e-05 now.*pooling: 'mean' there, "
                                         r"'pooled' now"):
        check_run_state(*settings("--learning_rate=3e-5", "--pooling=pooled", "--train_batch_size=32",
                                  "--num_train_epochs=3"))
