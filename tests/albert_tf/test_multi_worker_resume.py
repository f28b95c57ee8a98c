"""MultiWorkerMirroredStrategy workers that restore different states stop, all of them, in one line.

Two real `albert-pretrain` processes under TF_CONFIG, each with its own
--output_dir as two hosts with local disks would have: the chief's folder holds
a checkpoint of step 2, the other worker's is empty. Before the check, the
chief resumed at step 2, the other worker trained from step 0 with random
weights, and the chief exited 0 (review F2).
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import training_testlib as tl  # noqa: E402


def _flags(root, output_dir, steps, *extra):
    return [f"--albert_config_file={root / 'albert_config.json'}",
            f"--input_file={root / 'train.tfrecord'}", f"--output_dir={output_dir}",
            "--train_batch_size=8", "--max_seq_length=16", "--max_predictions_per_seq=3",
            f"--num_train_steps={steps}", "--num_warmup_steps=1", "--save_checkpoints_steps=100",
            "--log_steps=1", "--mixed_precision=float32", *extra]


def _env(**extra):
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)


def test_workers_that_restored_different_steps_both_stop_in_one_line_before_training(tmp_path):
    tl.write_tfrecords(str(tmp_path / "train.tfrecord"), 32, seed=3)
    tl.tiny_config().to_json_file(str(tmp_path / "albert_config.json"))
    host0, host1 = tmp_path / "host0", tmp_path / "host1"
    # Step 2 in the chief's folder, by one process of two replicas (the settings of two workers).
    first = subprocess.run([sys.executable, "-m", "albert_tf.bin.pretrain", "--strategy=mirrored",
                            "--num_cpu_devices=2"] + _flags(tmp_path, host0, 2), cwd=REPO, env=_env(),
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (host0 / "ckpt-2.index").exists()

    cluster = {"worker": [f"127.0.0.1:{p}" for p in tl.free_ports(2)]}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "albert_tf.bin.pretrain", "--strategy=multi_worker_mirrored"]
        + _flags(tmp_path, folder, 4), cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})))
        for index, folder in enumerate((host0, host1))]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    for index, (proc, err) in enumerate(zip(procs, errs)):
        assert proc.returncode == 1, err[-3000:]
        lines = [line for line in err.splitlines() if line.startswith("albert-pretrain: ")]
        assert len(lines) == 1, err[-3000:]
        assert lines[0].startswith("albert-pretrain: The workers did not restore the same training state: "
                                   "worker 0 restored step 2 and worker 1 step 0 (this worker, "
                                   f"worker {index}, restored "), lines[0]
        assert "--output_dir must be one folder that every worker sees" in lines[0]
        assert "Training steps" not in err and "step 3/4" not in err
    assert f"restored from {host0 / 'ckpt-2'})" in errs[0]
    assert f"restored nothing (no checkpoint in {host1})" in errs[1]
    assert not list(host0.glob("ckpt-3*")) and not list(host0.glob("ckpt-4*"))
