"""albert-finetune --optimizer and --pooling: the flags reach the optimizer and the classifier, are
validated, and the optimizer is part of the run's settings."""

import json
import os
import subprocess
import sys
import types

import pytest
from absl import flags

import albert_tf
from albert_tf.bin import finetune
from albert_tf.tasks import runner
from albert_tf.tasks.runner import FinetuneOptions
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _options(tmp_path, **kwargs):
    return FinetuneOptions("csv", str(tmp_path), str(tmp_path / "out"), albert_config_file="c.json",
                           do_train=True, **kwargs)


def _optimizer_parsed_by_albert_finetune(tmp_path, choice: str, *extra: str):
    """albert-finetune's own flag parsing, in a fresh process: in this one another binary (albert-pretrain, whose
    --optimizer takes lamb/adamw) may have defined --optimizer first, and absl keeps the first definition."""
    code = ("import sys; from absl import flags; from albert_tf.bin import finetune; finetune._define_flags(); "
            "flags.FLAGS(sys.argv); o = finetune.options_from_flags(); print(o.optimizer, o.adam_epsilon)")
    done = subprocess.run([sys.executable, "-c", code, "--task=csv", f"--data_dir={tmp_path}",
                           f"--output_dir={tmp_path / 'o'}", f"--optimizer={choice}", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 0, done.stderr[-2000:]
    parsed, epsilon = done.stdout.strip().splitlines()[-1].split()
    return parsed, None if epsilon == "None" else float(epsilon)


@pytest.mark.parametrize("choice, extra, corrected, epsilon", [
    ("adamw", (), True, 1e-8), ("adamw_original", (), False, 1e-6), ("adamw", ("--adam_epsilon=1e-7",), True, 1e-7)])
def test_optimizer_flag_reaches_the_optimizer(tmp_path, choice, extra, corrected, epsilon):
    parsed, parsed_epsilon = _optimizer_parsed_by_albert_finetune(tmp_path, choice, *extra)
    assert parsed == choice
    options = _options(tmp_path, optimizer=parsed, adam_epsilon=parsed_epsilon, learning_rate=1e-3)
    model = albert_tf.AlbertClassifier(tiny_config(), 2)
    opt = runner._make_optimizer(options, {"total_steps": 10, "warmup_steps": 1}, model)
    assert opt.bias_correction is corrected
    assert opt.epsilon == epsilon  # torch's 1e-8 with bias correction, the original's 1e-6 without
    assert (opt.weight_decay_rate, opt.global_clipnorm) == (0.01, 1.0)


def test_default_is_bias_corrected_and_bad_values_name_the_flag(tmp_path):
    assert FinetuneOptions("csv", "d", "o").optimizer == "adamw"
    with pytest.raises(ValueError, match="--optimizer must be one of adamw, adamw_original, got 'lamb'"):
        _options(tmp_path, optimizer="lamb").validate()
    with pytest.raises(ValueError, match="--adam_epsilon must be positive, got -1.0"):
        _options(tmp_path, adam_epsilon=-1.0).validate()


def test_run_state_records_the_optimizer_and_refuses_to_resume_with_another(tmp_path):
    os.makedirs(tmp_path / "out")
    task = types.SimpleNamespace(name="csv")
    schedule = {"total_steps": 10, "warmup_steps": 1, "epochs": 1, "steps_per_epoch": 10}

    def check(options):
        runner._check_run_state(options, runner.run_settings(options, task, schedule, "float32"))

    check(_options(tmp_path))
    with open(tmp_path / "out" / runner.RUN_STATE_FILE) as f:
        assert json.load(f)["optimizer"] == "adamw"
    with pytest.raises(ValueError, match="optimizer: 'adamw' there, 'adamw_original' now"):
        check(_options(tmp_path, optimizer="adamw_original"))


@pytest.mark.parametrize("choice", ["pooled", "mean"])
def test_pooling_flag_reaches_the_classifier(tmp_path, choice):
    from albert_tf.tasks.registry import get_task

    spm = train_tiny_spm(str(tmp_path))
    finetune._define_flags()
    FLAGS.unparse_flags()
    try:
        FLAGS(["albert-finetune", "--task=glue/sst-2", f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'o'}",
               f"--pooling={choice}", "--max_seq_length=32", f"--spm_model_file={spm}"])
        options = finetune.options_from_flags()
    finally:
        FLAGS.unparse_flags()
    assert options.task_options.pooling == choice
    task = get_task("glue/sst-2", options.task_options)
    data = types.SimpleNamespace(label_names=["0", "1"], text_pairs=None)
    model = task.build_model(tiny_config(), None, data)
    assert model.pooling == choice and model.task_config["pooling"] == choice


def test_train_step_and_warmup_step_set_the_schedule(tmp_path):
    finetune._define_flags()
    FLAGS.unparse_flags()
    try:
        FLAGS(["albert-finetune", "--task=csv", f"--data_dir={tmp_path}", f"--output_dir={tmp_path / 'o'}",
               "--train_batch_size=32", "--num_train_epochs=3", "--warmup_proportion=0.1", "--train_step=800",
               "--warmup_step=200"])
        options = finetune.options_from_flags()
    finally:
        FLAGS.unparse_flags()
    # 1,000 examples: 32 batches a pass; 800 steps = 25 passes whatever --num_train_epochs says.
    assert runner.training_schedule(1000, options) == {"total_steps": 800, "warmup_steps": 200, "epochs": 25,
                                                       "steps_per_epoch": 32, "last_epoch_steps": 32}
    # Only the steps: warmup from the proportion of those steps; without them: epochs as before.
    assert runner.training_schedule(1000, FinetuneOptions("csv", "d", "o", train_step=50))["warmup_steps"] == 5
    assert runner.training_schedule(1000, FinetuneOptions("csv", "d", "o"))["total_steps"] == 93
    with pytest.raises(ValueError, match=r"--warmup_step must be in \[0, --train_step=800\), got 800"):
        _options(tmp_path, train_step=800, warmup_step=800).validate()
    with pytest.raises(ValueError, match="--train_step must be positive, got 0"):
        _options(tmp_path, train_step=0).validate()


_EXPORT_FLAGS_FIRST = r"""
import sys
from absl import flags
from albert_tf.bin import export, finetune
export._define_flags()  # albert-export's --do_lower_case (default None) is the process's definition
finetune._define_flags()
flags.FLAGS(["albert-finetune", "--task=csv", "--data_dir=d", "--output_dir=o", *sys.argv[1:]])
print(finetune.options_from_flags().task_options.do_lower_case)
"""


@pytest.mark.parametrize("given,expected", [([], "True"), (["--nodo_lower_case"], "False"),
                                            (["--do_lower_case"], "True")])
def test_lower_casing_default_holds_when_albert_export_defined_the_flag_first(given, expected):
    """A process that defined albert-export's flags first (a test, a notebook) still fine-tunes with
    albert-finetune's default: a resume there compared None with the killed run's True and was refused."""
    done = subprocess.run([sys.executable, "-c", _EXPORT_FLAGS_FIRST, *given], capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
