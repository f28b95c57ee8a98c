"""Task registry, the step schedule, option checks and eval_results.txt round trip."""

import re

import pytest

from albert_tf.tasks import FinetuneOptions, TaskOptions, get_task, task_names
from albert_tf.tasks import runner


def test_every_task_name_maps_to_its_selection_metric():
    expected = {"glue/cola": "matthew_corr", "glue/sts-b": "pearson", "glue/sst-2": "accuracy",
                "glue/mnli": "accuracy", "csv": "accuracy", "squad_v1": "f1", "squad_v2": "f1",
                "race": "accuracy", "tagging": "f1"}
    for name, metric in expected.items():
        assert get_task(name, TaskOptions()).selection_metric == metric, name
    assert get_task("csv", TaskOptions(regression=True)).selection_metric == "pearson"
    assert set(expected) <= set(task_names())
    with pytest.raises(ValueError, match=r"--task='glue/sst3' is not a known task; expected one of: glue/cola"):
        get_task("glue/sst3", TaskOptions())


@pytest.mark.parametrize("examples,batch,epochs,per_epoch,expected", [
    # The original: int(examples / batch * epochs) steps, warmup int(10%).
    (1000, 32, 3.0, None, {"total_steps": 93, "warmup_steps": 9, "epochs": 3, "steps_per_epoch": 31,
                           "last_epoch_steps": 31}),
    # 1.5 epochs = int(15.0) = 15 steps: 2 Keras epochs of 8 and 7 (the old
    # code ran 2 x 8 = 16, one step more than the original).
    (100, 10, 1.5, None, {"total_steps": 15, "warmup_steps": 1, "epochs": 2, "steps_per_epoch": 8,
                          "last_epoch_steps": 7}),
    # --steps_per_epoch cuts the run into shorter checkpoint intervals.
    (1000, 10, 1.0, 25, {"total_steps": 100, "warmup_steps": 10, "epochs": 4, "steps_per_epoch": 25,
                         "last_epoch_steps": 25}),
    # 10 steps in epochs of at most 4: ceil(10/4) = 3 epochs of ceil(10/3) = 4, 4 and 2
    # (the old code ran 3 x 4 = 12: epochs - 1 = 2 steps more).
    (10, 1, 1.0, 4, {"total_steps": 10, "warmup_steps": 1, "epochs": 3, "steps_per_epoch": 4,
                     "last_epoch_steps": 2}),
    # 7 steps in epochs of at most 2: 4 epochs of 2, 2, 2 and 1 (old: 8).
    (7, 1, 1.0, 2, {"total_steps": 7, "warmup_steps": 0, "epochs": 4, "steps_per_epoch": 2,
                    "last_epoch_steps": 1}),
    # Fewer examples than one batch still trains one step.
    (3, 32, 1.0, None, {"total_steps": 1, "warmup_steps": 0, "epochs": 1, "steps_per_epoch": 1,
                        "last_epoch_steps": 1}),
])
def test_training_schedule(examples, batch, epochs, per_epoch, expected):
    options = FinetuneOptions("csv", "d", "o", train_batch_size=batch, num_train_epochs=epochs,
                              steps_per_epoch=per_epoch)
    schedule = runner.training_schedule(examples, options)
    assert schedule == expected
    # The Keras epochs add up to exactly the original's step count.
    assert (schedule["epochs"] - 1) * schedule["steps_per_epoch"] + schedule["last_epoch_steps"] == \
        int(examples / batch * epochs) or examples < batch


@pytest.mark.parametrize("done,expected", [
    # 10 steps in Keras epochs of 4, 4, 2 (hand-worked): (initial_epoch, epochs, steps_per_epoch, start).
    (0, [(0, 2, 4, 0), (2, 3, 2, 8)]),
    (3, [(0, 1, 1, 3), (1, 2, 4, 4), (2, 3, 2, 8)]),  # resumed mid-epoch 1
    (4, [(1, 2, 4, 4), (2, 3, 2, 8)]),  # resumed at an epoch end
    (9, [(2, 3, 1, 9)]),
    (10, []),  # finished
])
def test_fit_segments(done, expected):
    calls = runner.fit_segments(done, {"total_steps": 10, "steps_per_epoch": 4})
    assert [(c["initial_epoch"], c["epochs"], c["steps_per_epoch"], c["start"]) for c in calls] == expected


def test_option_errors_name_the_flag(tmp_path):
    base = dict(task="csv", data_dir=str(tmp_path), output_dir=str(tmp_path / "o"), do_train=True,
                albert_config_file="c.json")
    for change, message in [({"learning_rate": 0.0}, "--learning_rate must be positive, got 0.0"),
                            ({"num_train_epochs": -1.0}, "--num_train_epochs must be positive"),
                            ({"warmup_proportion": 1.0}, r"--warmup_proportion must be in \[0, 1\), got 1.0"),
                            ({"layerwise_lr_decay": 1.5}, r"--layerwise_lr_decay must be in \(0, 1\]"),
                            ({"train_batch_size": 0}, "--train_batch_size must be positive"),
                            ({"albert_config_file": None}, "exactly one of --init_checkpoint"),
                            ({"strategy": "multi_worker_mirrored"}, "does not work with Keras model.fit")]:
        with pytest.raises(ValueError, match=message):
            FinetuneOptions(**{**base, **change}).validate()
    FinetuneOptions(**base).validate()


def test_eval_results_round_trip(tmp_path):
    path = str(tmp_path / "eval_results.txt")
    runner.write_eval_results(path, {"f1": 0.5, "accuracy": 0.912, "num_examples": 7})
    assert open(path).read() == "accuracy = 0.912\nf1 = 0.5\nnum_examples = 7\n"
    assert runner.read_eval_results(path) == {"accuracy": 0.912, "f1": 0.5, "num_examples": 7.0}


def test_spm_model_is_found_beside_the_checkpoint(tmp_path):
    folder = tmp_path / "pretrained"
    folder.mkdir()
    (folder / "spm.model").write_bytes(b"x")
    options = FinetuneOptions("csv", str(tmp_path), str(tmp_path / "o"), init_checkpoint=str(folder), do_train=True)
    assert runner.find_spm_model(options) == str(folder / "spm.model")
    options = FinetuneOptions("csv", str(tmp_path), str(tmp_path / "o"), albert_config_file="c.json", do_train=True)
    with pytest.raises(FileNotFoundError, match="give --spm_model_file"):
        runner.find_spm_model(options)


@pytest.mark.parametrize("task,change,message", [
    ("squad_v2", {"doc_stride": 64}, "doc_stride: 128 there, 64 now"),
    ("squad_v1", {"max_query_length": 32}, "max_query_length: 64 there, 32 now"),
    ("race", {"max_qa_length": 64}, "max_qa_length: 128 there, 64 now"),
    ("glue/sst-2", {"dropout_rate": 0.0}, "dropout: 0.1 there, 0.0 now"),
    ("csv", {"label_column": "y"}, "label_column: 'label' there, 'y' now"),
])
def test_resume_refuses_other_reader_settings_naming_both_values(tmp_path, task, change, message):
    def settings(**task_options):
        options = FinetuneOptions(task, str(tmp_path), str(tmp_path), task_options=TaskOptions(**task_options))
        return options, runner.run_settings(options, get_task(task, options.task_options),
                                            {"total_steps": 10}, "float32")

    options, state = settings()
    runner._check_run_state(options, state)  # records it
    runner._check_run_state(options, settings()[1])  # the same settings resume
    with pytest.raises(ValueError, match=re.escape(message)):
        runner._check_run_state(options, settings(**change)[1])


def _settings(tmp_path, spm=None, **options):
    options = FinetuneOptions("glue/sst-2", str(tmp_path), str(tmp_path), task_options=TaskOptions(
        spm_model_file=spm), **options)
    return options, runner.run_settings(options, get_task("glue/sst-2", options.task_options),
                                        {"total_steps": 10}, "float32")


@pytest.mark.parametrize("first,then,refused", [
    ({}, {"adam_epsilon": 1e-8}, None),  # explicit default of adamw: the same run
    ({"optimizer": "adamw_original"}, {"optimizer": "adamw_original", "adam_epsilon": 1e-6}, None),
    ({}, {"adam_epsilon": 1e-7}, "adam_epsilon: 1e-08 there, 1e-07 now"),
    # adamw_original's default is 1e-6: not the 1e-8 the first run used.
    ({"adam_epsilon": 1e-8}, {"optimizer": "adamw_original"}, "adam_epsilon: 1e-08 there, 1e-06 now"),
])
def test_resume_compares_the_resolved_adam_epsilon(tmp_path, first, then, refused):
    options, state = _settings(tmp_path, **first)
    runner._check_run_state(options, state)
    if refused is None:
        runner._check_run_state(options, _settings(tmp_path, **then)[1])
    else:
        with pytest.raises(ValueError, match=re.escape(refused)):
            runner._check_run_state(options, _settings(tmp_path, **then)[1])


def test_resume_refuses_another_sentencepiece_model_by_checksum(tmp_path):
    import hashlib

    a, b, same = tmp_path / "a.model", tmp_path / "b.model", tmp_path / "copy.model"
    a.write_bytes(b"vocabulary one")
    b.write_bytes(b"vocabulary two")
    same.write_bytes(b"vocabulary one")
    options, state = _settings(tmp_path, str(a))
    sha_a, sha_b = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b))
    assert state["spm_model_sha256"] == sha_a == runner.file_sha256(str(a))
    runner._check_run_state(options, state)
    runner._check_run_state(options, _settings(tmp_path, str(same))[1])  # the same bytes elsewhere resume
    with pytest.raises(ValueError, match=re.escape(f"spm_model_sha256: {sha_a!r} there, {sha_b!r} now")):
        runner._check_run_state(options, _settings(tmp_path, str(b))[1])


def test_a_run_state_of_the_previous_version_still_resumes(tmp_path):
    """Earlier versions recorded adam_epsilon as given (None: the default) and no SentencePiece checksum."""
    import json

    spm = tmp_path / "a.model"
    spm.write_bytes(b"vocabulary one")
    options, state = _settings(tmp_path, str(spm))
    old = {**state, "adam_epsilon": None}
    del old["spm_model_sha256"]
    (tmp_path / runner.RUN_STATE_FILE).write_text(json.dumps(old))
    runner._check_run_state(options, state)  # the same run: resumes
    # ... and a real change is still refused against the old file.
    with pytest.raises(ValueError, match=re.escape("adam_epsilon: 1e-08 there, 1e-07 now")):
        runner._check_run_state(options, _settings(tmp_path, str(spm), adam_epsilon=1e-7)[1])
