"""The resume columns of the contract matrix, for every fine-tuning head (issue 29).

Rows: `HEADS` (conftest.py): classifier (single sentence, sentence pair,
regression, pooled and mean pooling), span QA v1 and v2, multiple choice,
tagging. Columns:

- kill -9 mid-pass, then the same command resumes: the resume state at the
  end (weights, optimizer slots and step, dropout seed states, data position)
  equals an uninterrupted run's exactly;
- a --do_train rerun of a finished run trains nothing and changes nothing;
- a rerun with another batch size, max_seq_length, learning rate, warmup or
  SentencePiece model (same size, other pieces: compared by sha256) is refused
  in one line naming the setting and both values, and changes nothing.

Each head's uninterrupted run is made once per test run (`finetuned_heads`,
shared with the remote-folder and export contracts), and the killed run in a
subprocess. A run is 12 steps in two Keras epochs of
6 with the resume state every 2 steps; the kill comes at step 5, so the last
state is step 4's, mid-epoch and mid-pass (every head's data holds 3 batches a
pass), and the resumed run crosses the end of a Keras epoch and of passes.
"""

import hashlib
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
from absl import flags

import albert_tf
from albert_tf.bin import finetune
from albert_tf.tasks import callbacks as cb
from tests.contracts.conftest import HEADS, file_digests, finetune_argv

FLAGS = flags.FLAGS
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_KILL_AT_STEP = """
import os, signal, sys
from absl import flags
from albert_tf.bin import finetune
from albert_tf.tasks import callbacks as cb
step = int(sys.argv[1])
original = cb.ProgressLogger.on_train_batch_end

def kill_at_step(self, batch, logs=None):
    original(self, batch, logs)
    if int(self.model.optimizer.iterations.numpy()) == step:
        os.kill(os.getpid(), signal.SIGKILL)  # as kill -9: no handler, no cleanup

cb.ProgressLogger.on_train_batch_end = kill_at_step
finetune._define_flags()
flags.FLAGS(["albert-finetune"] + sys.argv[2:])
finetune.main(["albert-finetune"])
"""


def _run(argv):
    """albert-finetune's main in this process, on `argv` (flags reset afterwards)."""
    finetune._define_flags()
    FLAGS.unparse_flags()
    FLAGS(["albert-finetune"] + list(argv))
    try:
        return finetune.main(["albert-finetune"])
    finally:
        FLAGS.unparse_flags()


def _resume_state(output_dir):
    """Every variable of the latest resume checkpoint, by checkpoint name."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.path.join(output_dir, cb.RESUME_DIR))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def _position(state):
    return tuple(int(state[f"{name}/.ATTRIBUTES/VARIABLE_VALUE"]) for name in ("batches", "data_pass", "pass_batch"))


@pytest.fixture(scope="module")
def runs(contract_assets, finetuned_heads, tmp_path_factory):
    """head name -> {"data", "whole", "killed", "kill"}, made on first use.

    whole: the uninterrupted run (`finetuned_heads`, shared with other contract files: read only); killed: the
    same command on the same data, killed with SIGKILL at step 5 in a subprocess; kill: that subprocess's
    (returncode, output).
    """
    made = {}

    def get(name):
        if name not in made:
            folder = str(tmp_path_factory.mktemp(name))
            data, whole = finetuned_heads[name]["data"], finetuned_heads[name]["run"]
            killed = os.path.join(folder, "killed")
            proc = subprocess.run([sys.executable, "-c", _KILL_AT_STEP, "5"] + finetune_argv(
                HEADS[name], data, killed, contract_assets), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, cwd=ROOT, timeout=300)
            made[name] = {"data": data, "whole": whole, "killed": killed,
                          "kill": (proc.returncode, proc.stdout)}
        return made[name]

    return get


@pytest.mark.parametrize("name", sorted(HEADS))
def test_kill_9_mid_pass_then_resume_equals_an_uninterrupted_run(name, runs, contract_assets):
    run = runs(name)
    returncode, stderr = run["kill"]
    assert returncode == -9, stderr[-3000:]
    killed = run["killed"]
    argv = finetune_argv(HEADS[name], run["data"], killed, contract_assets)
    batches, data_pass, pass_batch = _position(_resume_state(killed))
    assert batches == 4 and pass_batch != 0, (batches, data_pass, pass_batch)  # mid-pass, not at a pass end
    _run(argv)
    want, got = _resume_state(run["whole"]), _resume_state(killed)
    assert sorted(got) == sorted(want)
    assert _position(want)[0] == 12
    model = albert_tf.load_task_model(run["whole"])
    if any(isinstance(layer, keras.layers.Dropout) and layer.rate > 0 for layer in model._flatten_layers()):
        assert any("seed_states" in key for key in want), sorted(want)  # the dropout seeds resume too
    # The optimizer holds every trainable variable of the head, those without a gradient (the
    # pooler of span QA and tagging) included: one variable list on the first run and on resume.
    trainable = len(model.trainable_variables)
    slots = [n for n in want if n.startswith("optimizer/_variables/")]
    assert len(slots) >= 2 * trainable, (len(slots), trainable)  # Adam's m and v of each
    for key in want:  # weights, optimizer slots and step, dropout seed states, data position
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_do_train_rerun_of_a_finished_run_trains_nothing_and_changes_nothing(name, runs, contract_assets,
                                                                             monkeypatch):
    run = runs(name)
    before = file_digests(run["whole"])
    logged = []
    monkeypatch.setattr(finetune_logging(), "info", lambda fmt, *a: logged.append(fmt % a if a else fmt))
    _run(finetune_argv(HEADS[name], run["data"], run["whole"], contract_assets))
    assert any(line.startswith("Training already finished (12 steps)") for line in logged), logged
    assert not any(line.startswith("step ") for line in logged), logged
    assert file_digests(run["whole"]) == before


# One changed setting per case, and the words the refusal must hold.
CHANGES = {
    "batch_size": ("--train_batch_size=2", "train_batch_size: 4 there, 2 now"),
    "max_seq_length": ("--max_seq_length=24", "max_seq_length: 32 there, 24 now"),
    "learning_rate": ("--learning_rate=5e-4", "learning_rate: 0.001 there, 0.0005 now"),
    "warmup": ("--warmup_step=2", "warmup_steps: 1 there, 2 now"),
    "spm_model": ("--spm_model_file={other_spm}", "spm_model_sha256: '{spm_sha}' there, '{other_sha}' now"),
}


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("name", sorted(HEADS))
def test_rerun_with_another_setting_is_refused_naming_it(name, change, runs, contract_assets):
    run = runs(name)
    before = file_digests(run["whole"])
    values = {"other_spm": contract_assets["other_spm"], "spm_sha": _sha256(contract_assets["spm"]),
              "other_sha": _sha256(contract_assets["other_spm"])}
    flag, message = (s.format(**values) for s in CHANGES[change])
    with pytest.raises(ValueError, match=re.escape(message)) as raised:
        _run(finetune_argv(HEADS[name], run["data"], run["whole"], contract_assets, flag))
    text = str(raised.value)
    assert "\n" not in text and text.startswith(f"--output_dir={run['whole']!r} holds a fine-tuning run"), text
    assert file_digests(run["whole"]) == before


def finetune_logging():
    import importlib

    return importlib.import_module("absl.logging")
