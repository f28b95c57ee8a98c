"""The installed console scripts (albert-*): --help, bad input, TensorFlow's start-up log.

The scripts are the ones pip generated next to this Python (`.venv/bin/`):
their `__main__` is the generated wrapper, not the binary's module, which is
what broke --help before `albert_tf.bin.common.run_binary`. All runs start at
once (each pays TensorFlow's start-up) and the tests read their results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from albert_tf import AlbertConfig
from albert_tf.bin import common, convert, pretrain

from . import training_testlib

SCRIPTS_DIR = os.path.dirname(sys.executable)

# TensorFlow's notices on a CPU-only machine that a newcomer reads as failures, and its
# Python INFO notice after every checkpoint save (functional_saver.py).
NOISE = ("failed call to cuInit", "oneDNN custom operations", "cpu_feature_guard", "Sharding callback duration")
# Runs that ask for everything (--verbosity=1): TensorFlow's notices are expected there.
VERBOSE = ("pretrain_saves_checkpoints_verbose",)


def _script(name: str) -> str:
    path = os.path.join(SCRIPTS_DIR, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not installed next to {sys.executable} (pip install -e .)")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> CompletedProcess-like (returncode, stdout, stderr) of every run below."""
    work = tmp_path_factory.mktemp("binaries")
    config_file = work / "albert_config.json"
    config_file.write_text(json.dumps(AlbertConfig.tiny().to_dict()))
    partial_config = {k: v for k, v in AlbertConfig.tiny().to_dict().items() if k != "num_hidden_layers"}
    partial_config_file = work / "partial_config.json"
    partial_config_file.write_text(json.dumps(partial_config))
    shard = work / "data.tfrecord"
    shard.write_bytes(b"not empty")  # never read: the missing checkpoint stops the run first
    corpus = work / "corpus.txt"
    corpus.write_text("the cat sat on the mat.\nthe dog sat on the log.\n\na bird sang.\n")
    tiny = training_testlib.tiny_config()
    tiny.to_json_file(str(work / "tiny_config.json"))
    training_testlib.write_tfrecords(str(work / "tiny.tfrecord"), 8, seed=1)
    # Two steps, a checkpoint after each: TensorFlow's saver logs its notice at every save.
    saves = ["albert-pretrain", f"--albert_config_file={work / 'tiny_config.json'}",
             f"--input_file={work / 'tiny.tfrecord'}", "--train_batch_size=4",
             f"--max_seq_length={training_testlib.SEQ}", f"--max_predictions_per_seq={training_testlib.PREDS}",
             "--num_train_steps=2", "--num_warmup_steps=1", "--save_checkpoints_steps=1", "--log_steps=1"]
    commands = {
        "convert_help": ["albert-convert", "--help"],
        "pretrain_helpshort": ["albert-pretrain", "--helpshort"],
        "convert_helpfull": ["albert-convert", "--helpfull"],
        "convert_missing_input": ["albert-convert", f"--input={work / 'missing'}", f"--output_dir={work / 'out'}"],
        "create_vocab_missing_input": [
            "albert-create-vocab", f"--input_file={work / 'missing*.txt'}", f"--model_prefix={work / 'vocab'}"
        ],
        "create_vocab_vocab_too_big": [  # SentencePiece's own RuntimeError, turned into one line of advice
            "albert-create-vocab", f"--input_file={corpus}", f"--model_prefix={work / 'vocab'}", "--vocab_size=5000"
        ],
        "pretrain_config_without_num_hidden_layers": [
            "albert-pretrain", f"--albert_config_file={partial_config_file}", f"--input_file={shard}",
            f"--output_dir={work / 'run'}",
        ],
        "pretrain_missing_init_checkpoint": [
            "albert-pretrain", f"--albert_config_file={config_file}", f"--input_file={shard}",
            f"--output_dir={work / 'run'}", f"--init_checkpoint={work / 'missing' / 'model.ckpt'}",
            "--train_batch_size=2", "--max_seq_length=16", "--max_predictions_per_seq=2", "--num_train_steps=1",
        ],
        "pretrain_saves_checkpoints": saves + [f"--output_dir={work / 'quiet'}"],
        "pretrain_saves_checkpoints_verbose": saves + [f"--output_dir={work / 'verbose'}", "--verbosity=1"],
    }
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    processes = {
        key: subprocess.Popen(
            [_script(argv[0])] + argv[1:], cwd=work, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for key, argv in commands.items()
    }
    results = {}
    for key, process in processes.items():
        stdout, stderr = process.communicate(timeout=300)
        results[key] = subprocess.CompletedProcess(commands[key], process.returncode, stdout, stderr)
    return results


def _section(text: str, title: str) -> str:
    """The lines from `title` to the next blank line."""
    start = text.index(title)
    end = text.find("\n\n", start)
    return text[start:] if end < 0 else text[start:end]


def _first_line(doc: str) -> str:
    return doc.strip().splitlines()[0]


def test_help_shows_usage_text_and_own_flags(runs):
    done = runs["convert_help"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert _first_line(convert.__doc__) in done.stdout
    for flag in ("--input:", "--output_dir:", "--spm_model_file:"):
        assert flag in done.stdout
    assert "--verbosity" not in done.stdout  # absl's own flags: --helpfull only
    assert "--helpfull" in done.stdout

    done = runs["pretrain_helpshort"]
    assert done.returncode == 0, done.stderr[-2000:]
    assert _first_line(pretrain.__doc__) in done.stdout
    # Grouped by flag group, each flag under its group's title.
    assert "--init_checkpoint:" in _section(done.stdout, "model flags:")
    assert "--learning_rate:" in _section(done.stdout, "optimization flags:")
    assert "--learning_rate:" not in _section(done.stdout, "model flags:")


def test_helpfull_still_lists_every_flag(runs):
    done = runs["convert_helpfull"]
    assert "--input:" in done.stdout
    assert "--verbosity" in done.stdout


@pytest.mark.parametrize("key,start,detail", [
    ("convert_missing_input", "albert-convert: --input: ", "missing"),
    ("create_vocab_missing_input", "albert-create-vocab: --input_file: ", "missing"),
    ("create_vocab_vocab_too_big", "albert-create-vocab: --vocab_size=5000 is more pieces than this text makes",
     "--nohard_vocab_limit"),
    ("pretrain_config_without_num_hidden_layers", "albert-pretrain: --albert_config_file: ",
     "required field(s) ['num_hidden_layers']"),
    ("pretrain_missing_init_checkpoint", "albert-pretrain: --init_checkpoint: ", "missing"),
])
def test_bad_input_is_one_line_naming_the_flag(runs, key, start, detail):
    done = runs[key]
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    # The binary's own INFO lines (absl format, filtered too) may come first; its error is one line.
    lines = common.filter_startup_log(done.stderr, have_nvidia_driver=False).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(start), lines
    assert detail in lines[0], lines


def test_no_cuda_error_on_a_cpu_only_machine(runs):
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("this machine has an NVIDIA driver")
    for key, done in runs.items():
        assert "failed call to cuInit" not in done.stderr, (key, done.stderr[-2000:])


def test_no_tensorflow_startup_notices(runs):
    # TensorFlow prints these while it loads; run_binary can only silence them
    # if the console script's imports (albert_tf, pipelines) do not load it.
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, albert_tf, pipelines; print('tensorflow' in sys.modules)"],
        capture_output=True, text=True, timeout=300)
    if probe.stdout.strip() == "True":
        pytest.xfail("albert_tf/__init__.py or pipelines/__init__.py imports TensorFlow at import, before "
                     "run_binary can quiet it (import lazily to fix)")
    for key, done in runs.items():
        if key in VERBOSE:
            continue
        for notice in NOISE:
            assert notice not in done.stderr, (key, notice, done.stderr[-2000:])


def test_tensorflow_notices_are_hidden_by_where_they_come_from(runs):
    # The same run twice: at the default verbosity TensorFlow's Python INFO
    # notices are gone and the binary's own INFO lines stay; --verbosity=1
    # shows the notice (so the run above did save, and the filter hid it).
    quiet, verbose = runs["pretrain_saves_checkpoints"], runs["pretrain_saves_checkpoints_verbose"]
    for done in (quiet, verbose):
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stderr.count("Saved checkpoint") >= 2, done.stderr[-3000:]
    assert "Sharding callback duration" not in quiet.stderr
    assert verbose.stderr.count("Sharding callback duration") >= 2, verbose.stderr[-3000:]
    tensorflow_info = [line for line in verbose.stderr.splitlines()
                       if line.startswith("I") and "functional_saver.py" in line]
    assert tensorflow_info and not any("functional_saver.py" in line for line in quiet.stderr.splitlines())


def test_filter_keeps_real_messages():
    text = ("W0000 00:00:1.0 something.cc:1] a real warning\n"
            "I0000 00:00:1.0 cpu_feature_guard.cc:227] This TensorFlow binary is optimized\n"
            "E0000 00:00:1.0 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)\n")
    assert common.filter_startup_log(text, have_nvidia_driver=False) == (
        "W0000 00:00:1.0 something.cc:1] a real warning\n")
    # With a driver installed, a failed cuInit is a real problem: shown.
    assert "cuInit" in common.filter_startup_log(text, have_nvidia_driver=True)


def test_every_console_script_runs_through_run_binary():
    # Read statically: importing some binaries defines absl flags at import.
    import ast
    import re

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(repo, "setup.py"), encoding="utf-8") as f:
        entry_points = re.findall(r'"(albert-[a-z-]+)=([\w.]+):(\w+)"', f.read())
    assert len(entry_points) >= 5
    for script, module, function in entry_points:
        path = os.path.join(repo, *module.split(".")) + ".py"
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        entry = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == function)
        calls = [node for node in ast.walk(entry) if isinstance(node, ast.Call)
                 and getattr(node.func, "id", None) == "run_binary"]
        assert calls, f"{script}: {module}.{function}() does not call albert_tf.bin.common.run_binary"
        assert isinstance(calls[0].args[2], ast.Constant) and calls[0].args[2].value == script, (
            f"{script}: run_binary is given another name")
