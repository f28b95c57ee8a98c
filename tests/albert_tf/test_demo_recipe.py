"""The demo's model and pretraining settings against what README and flags/recipes/small_pretrain.cfg say.

README: "pretrains a 611k-parameter ALBERT"; the demo's pretraining is the small recipe (LAMB 0.01, warmup
100, dynamic masking at 40%) at the demo's smaller scale. Cheap: no training, one tiny model build.
"""

import dataclasses
import json
import os

from absl import flags
from absl.testing import flagsaver

import albert_tf
import flags.core_flags as albert_flags
from albert_tf import planning, training
from albert_tf.demo.pretraining import demo_config
from albert_tf.demo.settings import DemoSettings

FLAGS = flags.FLAGS
if "masked_lm_prob" not in FLAGS:
    albert_flags.define_all_pretraining_flags()  # as albert-pretrain's run() does

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE = os.path.join(REPO, "flags", "recipes", "small_pretrain.cfg")


def test_the_demo_pretrains_a_611k_parameter_albert():
    """The count README quotes is the encoder's (what the demo's stage line prints), at the demo's vocabulary of
    6,000 pieces: the planner's terms less both heads, and the built model's own count."""
    settings = DemoSettings()
    config = demo_config(settings.vocab_size, settings.max_seq_length)
    terms = planning.parameter_terms(config)
    encoder = sum(terms.values()) - terms["mlm_head"] - terms["sop_head"]
    assert round(encoder / 1000) == 611, terms
    assert albert_tf.AlbertEncoder(config).count_params() == encoder


# What the demo changes from the recipe, each for its 2-core budget (README: 8 minutes measured): shorter rows
# (64 tokens, 10 masked in the shards) of a smaller vocabulary, a larger batch of them, 1,500 steps.
DOCUMENTED_DIFFERENCES = {"max_seq_length": (128, 64), "max_predictions_per_seq": (20, 10),
                          "train_batch_size": (32, 64), "num_train_steps": (1600, 1500),
                          "save_checkpoints_steps": (200, 250), "vocab_size": (8000, 6000),
                          "max_position_embeddings": (128, 64)}


def _recipe_flags():
    """The recipe as albert-pretrain parses it: {flag: value} of the flags it sets."""
    with flagsaver.flagsaver():
        FLAGS.unparse_flags()
        FLAGS(["albert-pretrain", f"--flagfile={RECIPE}"])
        names = [line.split("=")[0][2:] for line in open(RECIPE) if line.startswith("--")]
        values = {name: FLAGS[name].value for name in names}
    FLAGS.unparse_flags()
    return values


def _demo_values():
    """The same settings as the demo's pretraining stage passes them to run_pretraining."""
    from albert_tf.demo import pretraining, settings as settings_module

    settings = DemoSettings()
    optimization = training.OptimizationConfig(train_batch_size=settings.train_batch_size,
                                               num_train_steps=settings.pretrain_steps, optimizer="lamb",
                                               learning_rate=settings.learning_rate,
                                               num_warmup_steps=settings.warmup_steps_for_budget())
    values = dataclasses.asdict(optimization)
    values.update(masking="dynamic", masked_lm_prob=settings.masked_lm_prob, max_seq_length=settings.max_seq_length,
                  max_predictions_per_seq=settings_module.MAX_PREDICTIONS_PER_SEQ, save_checkpoints_steps=250)
    assert "save_checkpoints_steps=250" in open(pretraining.__file__).read()  # the stage's literal
    return values


def test_the_demo_pretrains_with_the_small_recipe():
    recipe = _recipe_flags()
    demo = _demo_values()
    compared = 0
    for name, value in recipe.items():
        if name == "albert_config_file":
            continue
        want = DOCUMENTED_DIFFERENCES.get(name, (value, value))
        assert (value, demo[name]) == want, name
        compared += 1
    assert compared == 13 and recipe["masking"] == "dynamic" and recipe["learning_rate"] == 0.01
    # The model: the recipe's config file against the demo's config, field by field.
    with open(os.path.join(REPO, recipe["albert_config_file"])) as f:
        small = json.load(f)
    mine = demo_config(DemoSettings().vocab_size, DemoSettings().max_seq_length).to_dict()
    for name, value in small.items():
        assert (value, mine[name]) == DOCUMENTED_DIFFERENCES.get(name, (value, value)), name
