"""A fine-tuning resume compares `--data_dir` as the place it names, whatever the working directory (issue 35, N6).

The run settings (albert_tf/tasks/run_state.py) record the data folder. `os.path.abspath` turned a URL into
`<cwd>/gs:/bucket/...`, so a preempted cloud job restarted from another directory was refused ("data_dir: ...
there, ... now"). A URL is kept as given (`pipelines.fileio.absolute`); a local path is made absolute, so the
same folder named relative to two directories is the same run, and another folder of the same relative name is
not. `ram://` (TensorFlow's in-memory file system, reachable like gs:// only through tf.io.gfile) stands for
gs://; it lives in one process, so albert-finetune's `main` runs in-process.
"""

import os
import uuid

import pytest
from absl import flags

from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm
from tests.albert_tf.tasks import finetune_data

FLAGS = flags.FLAGS


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run_state_paths")
    config_file = str(folder / "albert_config.json")
    tiny_config().to_json_file(config_file)
    return {"spm": train_tiny_spm(str(folder)), "config": config_file}


def _finetune(data_dir, output_dir, assets):
    """albert-finetune's main in this process: 3 steps of a tiny random-init SST-2 run, no evaluation."""
    from albert_tf.bin import finetune

    finetune._define_flags()
    FLAGS.unparse_flags()
    FLAGS(["albert-finetune", "--task=glue/sst-2", f"--data_dir={data_dir}", f"--output_dir={output_dir}",
           f"--albert_config_file={assets['config']}", f"--spm_model_file={assets['spm']}", "--init_checkpoint=",
           "--max_seq_length=16", "--train_batch_size=4", "--eval_batch_size=8", "--learning_rate=1e-3",
           "--train_step=3", "--warmup_step=1", "--strategy=default", "--mixed_precision=float32", "--seed=1",
           "--log_steps=1", "--optimizer=adamw", "--pooling=pooled", "--save_checkpoints_steps=1000",
           "--do_train", "--nodo_eval", "--nodo_predict"])
    try:
        finetune.main(["albert-finetune"])
    finally:
        FLAGS.unparse_flags()


def _recorded_data_dir(output_dir):
    from albert_tf.tasks.run_state import RUN_STATE_FILE
    from pipelines.fileio import read_json

    return read_json(os.path.join(str(output_dir), RUN_STATE_FILE))["data_dir"]


def test_a_url_data_dir_resumes_from_another_working_directory(assets, tmp_path, monkeypatch):
    import tensorflow as tf

    local = finetune_data.glue_sst2(str(tmp_path / "sst2"))
    data_dir = f"ram://run-state-{uuid.uuid4().hex[:8]}/glue/SST-2"
    tf.io.gfile.makedirs(data_dir)
    for name in os.listdir(local):
        tf.io.gfile.copy(os.path.join(local, name), f"{data_dir}/{name}")
    output_dir = tmp_path / "run"
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    monkeypatch.chdir(tmp_path / "first")
    _finetune(data_dir, output_dir, assets)
    assert _recorded_data_dir(output_dir) == data_dir  # as given, not <cwd>/ram:/...
    monkeypatch.chdir(tmp_path / "second")  # a scheduler restarts the same command elsewhere
    _finetune(data_dir, output_dir, assets)  # taken: the finished run is not refused
    assert _recorded_data_dir(output_dir) == data_dir


def test_a_relative_local_data_dir_compares_the_folder_it_names(assets, tmp_path, monkeypatch):
    finetune_data.glue_sst2(str(tmp_path / "a" / "data"))
    finetune_data.glue_sst2(str(tmp_path / "b" / "data"), n_train=8)  # another folder of the same relative name
    output_dir = tmp_path / "run"
    monkeypatch.chdir(tmp_path / "a")
    _finetune("data", output_dir, assets)
    assert _recorded_data_dir(output_dir) == str(tmp_path / "a" / "data")
    monkeypatch.chdir(tmp_path / "b")
    _finetune("../a/data", output_dir, assets)  # the same folder, named from elsewhere: taken
    with pytest.raises(ValueError, match=r"data_dir: '[^']*/a/data' there, '[^']*/b/data' now"):
        _finetune("data", output_dir, assets)  # b/data is another folder
