"""flags/recipes/*finetune*, glue_*, squad_*, race: each parses into albert-finetune's flags (absl --flagfile) and
gives the values of its source, typed here from the original's run_glue.sh and the ALBERT paper's appendix (not
read from the files); a recipe with a flag albert-finetune does not have fails to parse.

The flags are parsed in a fresh process: in a test process another binary (albert-pretrain) may have defined a
shared flag such as --optimizer first, with other choices.
"""

import glob
import json
import os
import shlex
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = os.path.join(REPO, "flags", "recipes")

# run_glue.sh per task: (learning rate, batch, train steps, warmup steps, checkpoint interval).
GLUE = {
    "sst-2": (1e-5, 32, 20935, 1256, 100), "mnli": (3e-5, 128, 10000, 1000, 100),
    "cola": (1e-5, 16, 5336, 320, 100), "qnli": (1e-5, 32, 33112, 1986, 200),
    "qqp": (5e-5, 128, 14000, 1000, 100), "rte": (3e-5, 32, 800, 200, 100),
    "sts-b": (2e-5, 16, 3598, 214, 100), "mrpc": (2e-5, 32, 800, 200, 100),
}
ORIGINAL = {"do_lower_case": True, "optimizer": "adamw_original"}
EXPECTED = {
    **{f"glue_{task}.cfg": {**ORIGINAL, "task": f"glue/{task}", "max_seq_length": 512, "learning_rate": lr,
                            "train_batch_size": batch, "train_step": steps, "warmup_step": warmup,
                            "steps_per_epoch": every}
       for task, (lr, batch, steps, warmup, every) in GLUE.items()},
    # The paper's appendix table.
    "squad_v1.cfg": {**ORIGINAL, "task": "squad_v1", "max_seq_length": 384, "learning_rate": 5e-5,
                     "train_batch_size": 48, "train_step": 3649, "warmup_step": 365, "doc_stride": 128,
                     "max_query_length": 64},
    "squad_v2.cfg": {**ORIGINAL, "task": "squad_v2", "max_seq_length": 512, "learning_rate": 3e-5,
                     "train_batch_size": 48, "train_step": 8144, "warmup_step": 814, "doc_stride": 128,
                     "max_query_length": 64},
    # bench/results/finetune_small_recipe.md: the grid's best on the demo's task.
    "small_finetune.cfg": {"optimizer": "adamw", "pooling": "mean", "learning_rate": 5e-4, "train_batch_size": 16,
                           "num_train_epochs": 5.0, "warmup_proportion": 0.1},
    "race.cfg": {**ORIGINAL, "task": "race", "max_seq_length": 512, "learning_rate": 2e-5, "train_batch_size": 32,
                 "train_step": 12000, "warmup_step": 1000, "max_qa_length": 128, "steps_per_epoch": 100},
}

_PARSE = """
import json, sys
from absl import flags as absl_flags
import flags.finetune_flags as finetune_flags

finetune_flags.define_finetune_flags()
FLAGS = absl_flags.FLAGS
out = {}
for path in sys.argv[1:]:
    FLAGS.unparse_flags()
    try:
        FLAGS(["albert-finetune", "--flagfile=" + path])
        out[path] = {"values": {name: FLAGS[name].value for name in FLAGS if FLAGS[name].present}}
    except absl_flags.Error as e:
        out[path] = {"error": str(e)}
print(json.dumps(out))
"""


def _parse(paths):
    result = subprocess.run([sys.executable, "-c", _PARSE, *paths], capture_output=True, text=True, cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def usage_line(name):
    """The recipe's usage line (its `#   albert-finetune ...` comment, continued by trailing backslashes), as a
    shell splits it."""
    with open(os.path.join(RECIPES, name), encoding="utf-8") as f:
        lines = [line.lstrip("#").strip() for line in f if line.startswith("#")]
    start = next(i for i, line in enumerate(lines) if line.startswith("albert-finetune "))
    text = ""
    for line in lines[start:]:
        if not line.endswith("\\"):
            return shlex.split(text + line)
        text += line[:-1] + " "
    raise AssertionError(f"{name}: the usage line's last line ends with a backslash")


def _finetune_recipes():
    names = [os.path.basename(p) for p in glob.glob(os.path.join(RECIPES, "*.cfg"))]
    return sorted(n for n in names if "finetune" in n or n.startswith(("glue_", "squad_", "race")))


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    bad = tmp_path_factory.mktemp("bad") / "bad.cfg"
    bad.write_text("# a recipe with a flag albert-finetune lacks\n--learning_rate=1e-4\n--num_train_steps=10\n")
    paths = [os.path.join(RECIPES, n) for n in _finetune_recipes()] + [str(bad)]
    # Each usage line's flags as one flagfile (its recipe's path made absolute: the tests run from anywhere).
    for name in _finetune_recipes():
        usage = tmp_path_factory.getbasetemp() / f"usage-{name}"
        usage.write_text("\n".join(f"--flagfile={os.path.join(REPO, arg.split('=', 1)[1])}"
                                   if arg.startswith("--flagfile=") else arg for arg in usage_line(name)[1:]) + "\n")
        paths.append(str(usage))
    return {os.path.basename(path): value for path, value in _parse(paths).items()}


def test_every_finetuning_recipe_is_checked():
    assert set(EXPECTED) == set(_finetune_recipes())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recipe_gives_the_sources_values(parsed, name):
    assert "error" not in parsed[name], parsed[name]
    # Exactly these flags: nothing more, nothing missing.
    assert parsed[name]["values"] == pytest.approx(EXPECTED[name]), name


def test_an_unknown_flag_in_a_recipe_fails(parsed):
    # albert-finetune counts steps with --train_step (the original's name); albert-pretrain's name is not its.
    assert "num_train_steps" in parsed["bad.cfg"]["error"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_usage_line_parses_with_the_recipe(parsed, name):
    """Each recipe's usage line names its own flagfile and a model folder alone (the vocabulary and the config are
    the folder's), and parses with albert-finetune's flags into the recipe's values plus its own.
    tests/flags/test_recipe_runs.py runs one usage line per task family through the installed binary."""
    usage = usage_line(name)
    assert usage[:2] == ["albert-finetune", f"--flagfile=flags/recipes/{name}"], usage
    assert not any(arg.startswith(("--spm_model_file", "--albert_config_file")) for arg in usage), usage
    got = parsed[f"usage-{name}"]
    assert "error" not in got, got
    own = dict(arg[2:].split("=", 1) if "=" in arg else (arg[2:], True) for arg in usage[2:])
    assert set(own) >= {"init_checkpoint", "data_dir", "output_dir", "do_train", "do_eval"}, own
    values = {k: v for k, v in got["values"].items() if k != "flagfile"}
    assert set(values) == set(EXPECTED[name]) | set(own)
    for key, value in own.items():  # the line's own flags win (given after the flagfile), as typed
        assert values[key] is True if value is True else str(values[key]) == value, key
    assert {k: values[k] for k in set(EXPECTED[name]) - set(own)} == pytest.approx(
        {k: v for k, v in EXPECTED[name].items() if k not in own})
