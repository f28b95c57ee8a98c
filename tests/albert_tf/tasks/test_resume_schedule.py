"""docs/finetuning.md's resume refusal, for the schedule: a rerun on the same folder with other total steps or
epochs (or warmup) is refused in one line naming the setting and both values; the same schedule resumes."""

import re

import pytest

from albert_tf.tasks import get_task
from albert_tf.tasks.run_state import check_run_state, run_settings
from albert_tf.tasks.runner import training_schedule
from tests.albert_tf.tasks.test_finetune_defaults import _options

EXAMPLES = 320  # the training split's size: with batch 32, 10 steps a pass


def _settings(output_dir, *argv):
    options = _options(f"--output_dir={output_dir}", "--do_train", "--train_batch_size=32", *argv)
    task = get_task(options.task, options.task_options)
    return options, run_settings(options, task, training_schedule(EXAMPLES, options), "float32")


@pytest.mark.parametrize("argv,message", [
    (("--num_train_epochs=5",), "total_steps: 30 there, 50 now"),
    (("--train_step=40",), "total_steps: 30 there, 40 now"),
    (("--num_train_epochs=3", "--warmup_proportion=0.5"), "warmup_steps: 3 there, 15 now"),
    (("--num_train_epochs=3", "--steps_per_epoch=5"), "epochs: 3 there, 6 now"),
])
def test_a_rerun_with_another_schedule_is_refused_naming_it(tmp_path, argv, message):
    options, first = _settings(tmp_path, "--num_train_epochs=3", "--warmup_proportion=0.1")
    assert (first["total_steps"], first["warmup_steps"]) == (30, 3)  # int(320 / 32 * 3), int(30 * 0.1)
    check_run_state(options, first)  # records it
    check_run_state(*_settings(tmp_path, "--num_train_epochs=3", "--warmup_proportion=0.1"))  # same: resumes
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        check_run_state(*_settings(tmp_path, "--warmup_proportion=0.1", *argv))
    assert "\n" not in str(refused.value)
