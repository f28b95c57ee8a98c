"""docs/pretraining.md's one-machine sequence, run as the page writes it through the installed binaries.

The commands are read from the page's "On one machine" section (so the page cannot drift from what runs here):

    albert-create-vocab --input_file='corpus/*.txt' --model_prefix=vocab/8k --vocab_size=8000
    albert-create-pretraining-data --input_file='corpus/*.txt' --spm_model_file=vocab/8k.model
        --output_dir=data/small --max_seq_length=128 --max_predictions_per_seq=20 --dupe_factor=5
    albert-plan --albert_config_file=flags/recipes/small_config.json --max_seq_length=128
        --max_predictions_per_seq=51 --train_batch_size=32 --device=cpu --cpu_memory_gib=16 --mixed_precision=float32
    albert-pretrain --flagfile=flags/recipes/small_pretrain.cfg --input_file='data/small/*.tfrecord'
        --spm_model_file=vocab/8k.model --output_dir=runs/small

in a folder that holds `corpus/` (a small generated corpus) and `flags/` (the checkout's, as from its root). Only
sizes are added after each command: the vocabulary size the too-small corpus names in its one-line refusal of
8,000 pieces (to both albert-create-vocab and albert-pretrain, as the page says), one pass over the text, and 4
steps with a checkpoint every 2.
"""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests import doc_blocks
from tests.pipelines.conftest import write_corpus

REPO = doc_blocks.REPO
BIN = os.path.dirname(sys.executable)
PAGE = "docs/pretraining.md"
RECIPE = os.path.join(REPO, "flags", "recipes", "small_pretrain.cfg")
SMALL_CONFIG = os.path.join(REPO, "flags", "recipes", "small_config.json")


def page_commands(heading: str = "## On one machine") -> dict:
    """The bash commands of the page's section under `heading`, by program (albert-plan, albert-pretrain, ...)."""
    with open(os.path.join(REPO, PAGE), encoding="utf-8") as f:
        text = f.read()
    start = text.index(heading + "\n")
    end = text.index("\n## ", start + len(heading))
    offset = text[:start].count("\n")
    found = {}
    for block in doc_blocks.parse_blocks(text[start:end], PAGE):
        if block.lang == "bash":
            for command in doc_blocks.commands(block):
                prog = doc_blocks.program(command.text)
                assert prog not in found, f"{PAGE}:{offset + command.line}: {prog} twice in the section"
                found[prog] = command.text
    return found


def recipe_flags(path: str = RECIPE) -> dict:
    """The --name=value lines of a flagfile."""
    with open(path, encoding="utf-8") as f:
        return dict(re.match(r"--(\w+)=(\S+)$", line.strip()).groups() for line in f
                    if line.startswith("--"))


def flag_value(command: str, name: str) -> str:
    values = [t.split("=", 1)[1] for t in shlex.split(command) if t.startswith(f"--{name}=")]
    assert len(values) == 1, f"{command}: --{name} given {len(values)} times"
    return values[0]


def _run(command: str, cwd, *extra: str) -> subprocess.CompletedProcess:
    """The command as the page writes it, through the installed binary, with `extra` flags after it."""
    argv = shlex.split(command) + list(extra)
    argv[0] = os.path.join(BIN, argv[0])
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=600)


def test_the_page_shows_the_four_commands_with_the_recipe_s_lengths():
    commands = page_commands()
    assert sorted(commands) == ["albert-create-pretraining-data", "albert-create-vocab", "albert-plan",
                                "albert-pretrain"]
    recipe = recipe_flags()
    data, plan = commands["albert-create-pretraining-data"], commands["albert-plan"]
    # The shards are written at the length and prediction count the recipe reads them with.
    assert flag_value(data, "max_seq_length") == recipe["max_seq_length"] == flag_value(plan, "max_seq_length")
    assert flag_value(data, "max_predictions_per_seq") == recipe["max_predictions_per_seq"]
    # The plan is of the recipe's model and batch, at the positions its dynamic masking gives a row.
    assert flag_value(plan, "albert_config_file") == recipe["albert_config_file"]
    assert flag_value(plan, "train_batch_size") == recipe["train_batch_size"]
    from albert_tf.training.configs import PretrainingDataConfig

    rows = PretrainingDataConfig(max_seq_length=int(recipe["max_seq_length"]),
                                 max_predictions_per_seq=int(recipe["max_predictions_per_seq"]),
                                 masking=recipe["masking"], masked_lm_prob=float(recipe["masked_lm_prob"]))
    assert flag_value(plan, "max_predictions_per_seq") == str(rows.train_predictions_per_seq())
    # One vocabulary throughout, of the config's size.
    vocab = flag_value(commands["albert-create-vocab"], "model_prefix") + ".model"
    assert flag_value(data, "spm_model_file") == vocab == flag_value(commands["albert-pretrain"], "spm_model_file")
    with open(SMALL_CONFIG, encoding="utf-8") as f:
        assert int(flag_value(commands["albert-create-vocab"], "vocab_size")) == json.load(f)["vocab_size"]
    assert flag_value(commands["albert-pretrain"], "flagfile") == "flags/recipes/small_pretrain.cfg"


def test_the_small_config_is_the_demo_s_model_at_the_recipe_s_length():
    """small_config.json is the model the recipe was measured on (bench/studies/learning_efficiency.py) and the
    demo trains (albert_tf/demo/pretraining.py), at 128 positions and 8,000 pieces."""
    import albert_tf
    from albert_tf.demo.pretraining import demo_config
    from bench.studies.learning_efficiency import MODEL

    config = albert_tf.AlbertConfig.from_json_file(SMALL_CONFIG)
    assert config == demo_config(8000, 128)
    assert {k: getattr(config, k) for k in MODEL} == MODEL
    assert config.max_position_embeddings >= int(recipe_flags()["max_seq_length"])
    # The recipe writes a checkpoint before its last step (the default, 5,000, is past its 1,600 steps).
    assert int(recipe_flags()["save_checkpoints_steps"]) < int(recipe_flags()["num_train_steps"])


def test_one_machine_sequence_through_the_installed_binaries(tmp_path):
    import albert_tf
    from pipelines import tokenizer

    commands = page_commands()
    (tmp_path / "corpus").mkdir()
    write_corpus(str(tmp_path / "corpus" / "a.txt"), num_docs=150, seed=5)
    os.symlink(os.path.join(REPO, "flags"), tmp_path / "flags")  # the recipes, as from the checkout's root

    # 8,000 pieces are more than this corpus makes: one line naming the most it makes and how to go on.
    refused = _run(commands["albert-create-vocab"], tmp_path)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    hint = re.fullmatch(r"albert-create-vocab: --vocab_size=8000 is more pieces than this text makes \(at most "
                        r"(\d+)\): give --vocab_size=\1 or less \(and albert-pretrain the same --vocab_size\), or "
                        r"--nohard_vocab_limit .*", last)
    assert hint, last
    pieces = int(hint.group(1))
    assert 100 < pieces < 8000
    done = _run(commands["albert-create-vocab"], tmp_path, f"--vocab_size={pieces}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert tokenizer.SentencePieceVocab.from_file(str(tmp_path / "vocab" / "8k.model")).vocab_size == pieces

    done = _run(commands["albert-create-pretraining-data"], tmp_path, "--dupe_factor=1")
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "data" / "small" / "pretrain.manifest.json", encoding="utf-8") as f:
        settings = json.load(f)["settings"]
    assert settings["max_seq_length"] == int(recipe_flags()["max_seq_length"])

    # albert-pretrain compares the run's lengths with the ones the manifest records, before step 1.
    from albert_tf.bin.pretrain import check_shard_lengths

    manifest = str(tmp_path / "data" / "small" / "pretrain.manifest.json")
    check_shard_lengths([manifest], 128, 20)
    with pytest.raises(ValueError, match=re.escape(
            f"--max_seq_length=512 (the shards: 128): {manifest} records the shards' lengths; train with "
            "--max_seq_length=128 --max_predictions_per_seq=20 or write shards at this run's lengths.")):
        check_shard_lengths([manifest], 512, 20)

    plan = _run(commands["albert-plan"], tmp_path)
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert "fits: yes" in plan.stdout and "parameters: 760,194" in plan.stdout

    pretrain = _run(commands["albert-pretrain"], tmp_path, f"--vocab_size={pieces}", "--num_train_steps=4",
                    "--save_checkpoints_steps=2", "--log_steps=1")
    assert pretrain.returncode == 0, pretrain.stderr[-4000:]
    assert "step 4/4 loss" in pretrain.stderr
    assert "Dynamic masking: masked_lm_prob 0.4, 51 masked positions per row" in pretrain.stderr
    out = tmp_path / "runs" / "small"
    assert {"ckpt-2.index", "ckpt-4.index", "spm.model", "albert_config.json"} <= set(os.listdir(out))

    model = albert_tf.load_checkpoint(str(out))
    expected = albert_tf.AlbertConfig.from_json_file(SMALL_CONFIG)
    assert model.config == expected.__class__(**{**expected.to_dict(), "vocab_size": pieces})
    assert tokenizer.SentencePieceVocab.from_file(str(out / "spm.model")).vocab_size == pieces


def test_a_vocabulary_of_another_size_is_refused_naming_the_flag(tmp_path):
    from albert_tf.bin import pretrain
    from pipelines import tokenizer

    model = tokenizer.train_sentencepiece([write_corpus(str(tmp_path / "c.txt"), num_docs=40)],
                                          str(tmp_path / "sp"), vocab_size=90, seed=1)
    pretrain.check_vocabulary(model, 90, "--vocab_size=90")
    with pytest.raises(ValueError, match=r"has 90 pieces but --albert_config_file=x.json has vocab_size=8000: "
                                         r"use the vocabulary the data was made with and give --vocab_size=90 "):
        pretrain.check_vocabulary(model, 8000, "--albert_config_file=x.json")


def pod_recipe_figures() -> dict:
    """The figures the pages quote for the paper's ALBERT-base recipe, computed by albert-plan's planner.

    One CPU machine of 128 GiB in float32 as written (accumulation 1) and with the page's accumulation of 64, and
    8 A100s with accumulation 8 (docs/scaling.md's plan), at the planner's defaults.
    """
    import albert_tf
    from albert_tf import planning

    base = albert_tf.AlbertConfig.from_preset("albert_base_v1")
    cpu = planning.cpu_device(planning.DEFAULT_CPU_FLOPS, 128 * planning.GIB)
    common = dict(seq=512, preds=20, train_batch_size=4096)
    as_written = planning.make_plan(base, precision="float32", device=cpu, **common)
    accumulated = planning.make_plan(base, gradient_accumulation_steps=64, precision="float32", device=cpu, **common)
    a100 = planning.make_plan(base, num_replicas=8, gradient_accumulation_steps=8, device=planning.DEVICES["a100"],
                              **common)
    steps = 125_000
    return {
        "as_written_gib": f"{as_written.memory.total / planning.GIB:,.0f} GiB",
        "accumulated_gib": f"{accumulated.memory.total / planning.GIB:,.2f} GiB",
        "cpu_step": f"{accumulated.step_seconds:,.0f} s a step",
        "cpu_years": f"{accumulated.step_seconds * steps / (365.25 * 86400):.0f} years",
        "cpu_hours_a_step": f"about {accumulated.step_seconds / 3600:.0f} hours a step",
        "a100_gib": f"{a100.memory.total / planning.GIB:,.2f} GiB per replica",
        "a100_step": f"about {a100.step_seconds:.1f} s a step",
        "a100_hours": f"about {a100.step_seconds * steps / 3600:.0f} hours",
    }


def test_the_pod_recipe_s_figures_on_the_page_are_the_planner_s():
    figures = pod_recipe_figures()
    with open(os.path.join(REPO, PAGE), encoding="utf-8") as f:
        section = f.read().split("## The paper's recipe (a pod)", 1)[1].split("\n## ", 1)[0]
    section = " ".join(section.split())
    for key in ("as_written_gib", "accumulated_gib", "cpu_step", "cpu_years", "a100_gib", "a100_step", "a100_hours"):
        assert figures[key].replace(" per replica", "") in section, (key, figures[key])


def test_every_figure_quoted_beside_the_pod_recipe_is_the_planner_s():
    """In any page's paragraph that names albert_base_pretrain.cfg (README.md's pretraining paragraph among them),
    each memory and step-time figure is one the planner gives for that recipe."""
    figures = pod_recipe_figures()
    allowed = {re.sub(r" per replica$", "", value) for value in figures.values()}
    quoted = re.compile(r"(?:about )?[\d,]+(?:\.\d+)? (?:GiB|s a step|hours a step)")
    for page in doc_blocks.pages():
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            paragraphs = re.split(r"\n\s*\n", f.read())
        for paragraph in paragraphs:
            if "albert_base_pretrain.cfg" not in paragraph or paragraph.lstrip().startswith("```"):
                continue
            for figure in quoted.findall(" ".join(paragraph.split())):
                assert figure in allowed or figure.removeprefix("about ") in allowed, (page, figure, sorted(allowed))
    assert quoted.findall("needs 4,521 GiB, about 1.2 s a step") == ["4,521 GiB", "about 1.2 s a step"]
