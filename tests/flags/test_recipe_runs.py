"""Each task family's recipe, run as its usage line says, through the installed albert-finetune, then albert-export.

The usage lines (`#   albert-finetune --flagfile=flags/recipes/NAME --data_dir=... --init_checkpoint=albert_base
--output_dir=runs/... --do_train --do_eval --do_predict`) run as typed in a folder holding `albert_base` in a
released google-research layout (30k-clean.model, model.ckpt-best.*, no `checkpoint` file: the golden fixture's
tiny model, 32 positions) and tiny task data under the line's --data_dir. Only the flagfile's path is made absolute
(the line is relative to the checkout) and size flags are appended (absl: later flags win). One recipe per task
family runs (GLUE single, GLUE pair, STS-B regression, SQuAD v1 and v2, RACE); tests/flags/test_recipes.py parses
every recipe's usage line with the binary's flags. The six results are exported in one process by albert-export's
`main` with the binary's flags (tests/contracts/test_exports.py's runner), and each SavedModel answers a request.
"""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.albert_tf import starting_points
from tests.albert_tf.tasks import finetune_data
from tests.contracts.test_exports import RUNNER
from tests.flags.test_recipes import REPO, usage_line

BIN = os.path.dirname(sys.executable)
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
# Size flags only: the recipe's rates, optimizer, casing and task stay as written.
SIZE = ("--max_seq_length=32", "--train_batch_size=4", "--eval_batch_size=8", "--train_step=2", "--warmup_step=0",
        "--steps_per_epoch=2", "--doc_stride=8", "--max_query_length=8", "--max_qa_length=16",
        "--save_checkpoints_steps=0")
# recipe -> (data maker for the usage line's --data_dir, export head, eval_results keys the task reports)
FAMILIES = {
    "glue_sst-2.cfg": (lambda d: finetune_data.glue_sst2(d, n_train=8, n_dev=4, n_test=2), "classifier",
                       {"accuracy", "eval_loss", "num_examples"}),
    "glue_mrpc.cfg": (lambda d: finetune_data.glue_pairs(d, "mrpc"), "classifier",
                      {"accuracy", "f1", "num_examples"}),
    "glue_sts-b.cfg": (lambda d: finetune_data.glue_pairs(d, "sts-b"), "classifier",
                       {"pearson", "spearman", "num_examples"}),
    "squad_v1.cfg": (lambda d: finetune_data.squad(d, n_train=4, n_dev=2), "span_qa", {"exact_match", "f1"}),
    "squad_v2.cfg": (lambda d: finetune_data.squad(d, version_2=True, n_train=4, n_dev=2), "span_qa",
                     {"exact", "f1", "HasAns_f1", "NoAns_f1"}),
    "race.cfg": (lambda d: finetune_data.race(os.path.dirname(d) or ".", n_train=4, n_dev=2), "multiple_choice",
                 {"accuracy", "num_examples"}),
}


def _flag(argv, name):
    return next(a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}="))


def _as_typed(name):
    """The usage line with its flagfile absolute and the size flags after it."""
    argv = usage_line(name)
    return [os.path.join(BIN, argv[0])] + [
        f"--flagfile={os.path.join(REPO, a.split('=', 1)[1])}" if a.startswith("--flagfile=") else a
        for a in argv[1:]] + list(SIZE)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Runs the six usage lines in one folder, then exports the six results: {recipe: {"out", "export", "log"}}."""
    root = str(tmp_path_factory.mktemp("recipe_runs"))
    spm = starting_points.vocabulary(root)
    starting_points.released_folder(os.path.join(root, "albert_base"), spm)
    done, jobs = {}, {}
    for name, (make_data, head, _) in FAMILIES.items():
        argv = _as_typed(name)
        make_data(os.path.join(root, _flag(argv, "data_dir")))
        ran = subprocess.run(argv, cwd=root, env=ENV, capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0, f"{name}: {' '.join(argv)}\n{ran.stderr[-3000:]}"
        out = os.path.join(root, _flag(argv, "output_dir"))
        export = os.path.join(root, "exports", name)
        jobs[name] = [f"--checkpoint={out}", f"--head={head}", f"--export_dir={export}", "--version=1"]
        done[name] = {"out": out, "export": os.path.join(export, "1"), "log": ran.stderr, "root": root}
    with open(os.path.join(root, "exports.json"), "w") as f:
        json.dump(jobs, f)
    results = os.path.join(root, "export_results.json")
    ran = subprocess.run([sys.executable, "-c", RUNNER, os.path.join(root, "exports.json"), results], cwd=REPO,
                         env=ENV, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    with open(results) as f:
        for name, result in json.load(f).items():
            done[name]["exported"] = result
    return done


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_usage_line_runs_from_a_released_folder(runs, name):
    """The line as typed: the released folder's vocabulary and config, the recipe's settings, every output."""
    run = runs[name]
    with open(os.path.join(run["out"], "finetune_run.json")) as f:
        settings = json.load(f)
    with open(os.path.join(run["root"], "albert_base", "30k-clean.model"), "rb") as f:
        assert settings["spm_model_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert settings["init_checkpoint"] == "albert_base"
    assert settings["max_seq_length"] == 32  # the later size flag won over the recipe's 512 / 384
    assert settings["optimizer"] == "adamw_original"  # the recipe's, kept
    assert "step 2/2 " in run["log"]
    with open(os.path.join(run["out"], "eval_results.txt")) as f:
        keys = {line.split(" = ")[0] for line in f}
    assert keys >= FAMILIES[name][2], keys
    assert any(n.endswith((".tsv", ".json")) and n not in ("finetune_run.json", "best_dev.json", "task_config.json")
               for n in os.listdir(run["out"])), os.listdir(run["out"])  # the prediction files


def _request(name):
    if name.startswith("squad"):
        return "serving_default", {"text": ["which word?"], "text_pair": ["ka lo mi ten ser qua."]}
    if name == "race.cfg":
        return "serving_default", {"text": ["ka lo mi ten."], "choices": [["ka", "lo", "mi", "ten"]]}
    if name == "glue_mrpc.cfg":
        return "serve_text_pair", {"text": ["ka lo mi", "ser qua"], "text_pair": ["ka lo", "vi don"]}
    if name == "glue_sts-b.cfg":  # a model fine-tuned on pairs serves pairs by default
        return "serving_default", {"text": ["ka lo mi", "ser qua"], "text_pair": ["ka lo", "vi don"]}
    return "serving_default", {"text": ["ka lo mi", "ser qua vi don"]}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_recipe_result_exports(runs, name):
    """albert-export of the run's folder writes a SavedModel that answers its head's request."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SentencePiece op)

    assert runs[name]["exported"] == {"ok": True}, runs[name]["exported"]
    signature, inputs = _request(name)
    answer = tf.saved_model.load(runs[name]["export"]).signatures[signature](
        **{k: tf.constant(v) for k, v in inputs.items()})
    rows = len(inputs["text"])
    for key, value in answer.items():
        assert value.shape[0] == rows, (key, value.shape)
        if value.dtype.is_floating:
            assert np.all(np.isfinite(value.numpy())), key
    if name == "race.cfg":
        np.testing.assert_allclose(answer["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
