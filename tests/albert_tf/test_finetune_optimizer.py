"""albert-finetune --optimizer: the flag reaches the optimizer, is validated and is part of the run's settings."""

import json
import os
import types

import pytest
from absl import flags

import albert_tf
from albert_tf.bin import finetune
from albert_tf.tasks import runner
from albert_tf.tasks.runner import FinetuneOptions
from tests.albert_tf.task_testlib import tiny_config

FLAGS = flags.FLAGS


def _options(tmp_path, **kwargs):
    return FinetuneOptions("csv", str(tmp_path), str(tmp_path / "out"), albert_config_file="c.json",
                           do_train=True, **kwargs)


@pytest.mark.parametrize("choice, corrected", [("adamw", True), ("adamw_original", False)])
def test_optimizer_flag_reaches_the_optimizer(tmp_path, choice, corrected):
    finetune._define_flags()
    FLAGS.unparse_flags()
    try:
        # Every shared flag explicit: another binary may have defined it first with its own default.
        FLAGS(["albert-finetune", "--task=csv", f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'o'}",
               f"--optimizer={choice}", "--learning_rate=1e-3", "--train_batch_size=8", "--max_seq_length=32"])
        options = finetune.options_from_flags()
    finally:
        FLAGS.unparse_flags()
    assert options.optimizer == choice
    model = albert_tf.AlbertClassifier(tiny_config(), 2)
    opt = runner._make_optimizer(options, {"total_steps": 10, "warmup_steps": 1}, model)
    assert opt.bias_correction is corrected
    assert (opt.weight_decay_rate, opt.global_clipnorm) == (0.01, 1.0)


def test_default_is_bias_corrected_and_bad_values_name_the_flag(tmp_path):
    assert FinetuneOptions("csv", "d", "o").optimizer == "adamw"
    with pytest.raises(ValueError, match="--optimizer must be one of adamw, adamw_original, got 'lamb'"):
        _options(tmp_path, optimizer="lamb").validate()


def test_run_state_records_the_optimizer_and_refuses_to_resume_with_another(tmp_path):
    os.makedirs(tmp_path / "out")
    task = types.SimpleNamespace(name="csv")
    schedule = {"total_steps": 10, "warmup_steps": 1, "epochs": 1, "steps_per_epoch": 10}
    runner._check_run_state(_options(tmp_path), task, schedule)
    with open(tmp_path / "out" / runner.RUN_STATE_FILE) as f:
        assert json.load(f)["optimizer"] == "adamw"
    with pytest.raises(ValueError, match="optimizer: 'adamw' there, 'adamw_original' now"):
        runner._check_run_state(_options(tmp_path, optimizer="adamw_original"), task, schedule)
