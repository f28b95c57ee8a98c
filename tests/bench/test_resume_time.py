"""bench.studies.resume_time: its flags, its shards (read by the demo's input), its table.

No resume is timed here (the study itself times them, each in a fresh process).
"""

import numpy as np
import pytest

from bench.studies import resume_time as rt


def test_the_default_steps_are_the_issues_and_the_steps_parse_sorted():
    args = rt.parse_args([])
    assert rt.step_list(args.steps) == [10, 1000, 10000]
    assert rt.step_list("1000, 10,10") == [10, 1000] and rt.step_list("") == []
    assert args.batch == 64  # the demo's batch (albert_tf/demo/settings.py)
    from albert_tf.demo.settings import DemoSettings

    assert DemoSettings().train_batch_size == args.batch and DemoSettings().max_seq_length == rt.SEQ


def test_the_shards_are_seeded_and_read_by_the_demos_dynamic_masking_input(tmp_path):
    pattern = rt.write_shards(str(tmp_path / "a"), 16)
    again = rt.write_shards(str(tmp_path / "b"), 16)
    for index in range(rt.FILES):
        name = f"train-{index}.tfrecord"
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert again.endswith("train-*.tfrecord")
    config, dataset_fn, kwargs = rt._run_parts(pattern, 4, 11)
    import tensorflow as tf

    batch = next(iter(dataset_fn(tf.distribute.InputContext())))
    assert batch["input_ids"].shape == (4, rt.SEQ)
    assert int(tf.reduce_max(batch["input_ids"])) < config.vocab_size == rt.VOCAB
    assert kwargs["data"].masking == "dynamic" and kwargs["optimization"].num_train_steps == 11
    assert float(np.sum(batch["masked_lm_weights"])) > 0


def test_the_table_gives_median_and_range_of_each_row_restores_first():
    figures = {(10, True): [5.0, 7.0, 6.0], (10, False): [2.0, 3.0, 2.5], (1000, False): [2.6, 2.4, 9.0]}
    sizes = {10: dict(with_input=2e6, without_input=1e6), 1000: dict(with_input=2.5e6, without_input=1e6)}
    lines = rt.table(figures, sizes).splitlines()
    assert lines[2] == "| 10 | restored from the checkpoint | 2.50 (2.00-3.00) | 3 | 2.0 (1.0) |"
    assert lines[3] == "| 1,000 | restored from the checkpoint | 2.60 (2.40-9.00) | 3 | 2.5 (1.0) |"
    assert lines[4] == "| 10 | read again (no input state) | 6.00 (5.00-7.00) | 3 | 2.0 (1.0) |"


def test_a_failed_resume_is_an_error_naming_its_step(tmp_path, monkeypatch):
    (tmp_path / "resume-10").mkdir()

    class Failed:
        returncode, stdout, stderr = 1, "", "Traceback ...\nTrainingError: boom"

    monkeypatch.setattr(rt.subprocess, "run", lambda *a, **k: Failed())
    with pytest.raises(RuntimeError, match="the resume at step 10 failed:\nTraceback"):
        rt.measure(dict(step=10, skip=False, pattern="p", batch=4), str(tmp_path))
