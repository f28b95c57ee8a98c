"""The "remote folder" column of the contract matrix: every head trained, resumed and exported on ram://.

`ram://` is TensorFlow's in-memory file system: like gs://, reachable through
tf.io.gfile only, and alive within one process, so every binary's `main` runs
in this process. For each row:

- fine-tuning heads: `albert-finetune` with --output_dir on ram:// stops after
  step 5 (a stop request, as SIGTERM or a lost lease gives: its resume state is
  written there), the same command resumes to step 12; the resume state equals
  the same command's uninterrupted run on a local folder in every variable;
- encoder and pretrainer: `albert-pretrain` on ram:// stopped after step 2 and
  resumed to 4, equal to a local uninterrupted run;
- then `albert-export` (ids-only signatures) reads the ram:// folder and writes
  to ram://; every signature of that SavedModel answers the same ids as the
  export of the local run (float32 at 1e-5).
"""

import os
import uuid

import numpy as np
import pytest
import tensorflow as tf
from absl import flags

from albert_tf import preemption
from tests.contracts.conftest import HEADS, finetune_argv
from tests.contracts.matrix import ROWS

FLAGS = flags.FLAGS
PRETRAINING_ROWS = ("encoder", "pretrainer")
EXPORT_HEAD = {"encoder": "encoder", "pretrainer": "pretrainer", "span_qa_v1": "span_qa", "span_qa_v2": "span_qa",
               "multiple_choice": "multiple_choice", "tagging": "tagging"}  # the classifiers: "classifier"


def _main(module, program, argv):
    """A binary's main in this process on `argv` (every other flag at its default; flags reset afterwards)."""
    FLAGS.unparse_flags()
    FLAGS([program, *argv])
    try:
        module.main([program])
    finally:
        FLAGS.unparse_flags()


def _stopped_after(step, module, program, argv, monkeypatch, hook_owner, hook_name, step_of):
    """Runs the binary with a stop request once `step_of(args)` reaches `step`; returns the Preempted."""
    original = getattr(hook_owner, hook_name)

    def hook(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if step_of(self, *args) == step:
            preemption.request_stop("a stop request")
        return result

    monkeypatch.setattr(hook_owner, hook_name, hook)
    with pytest.raises(preemption.Preempted) as stopped:
        _main(module, program, argv)
    monkeypatch.setattr(hook_owner, hook_name, original)
    return stopped.value


def _checkpoint(prefix):
    """Every variable of a checkpoint (a prefix: ram:// answers "is a folder" for any prefix)."""
    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    # The input iterator's state ("input/", a variant) is compared through the weights of the later steps.
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not name.startswith(("save_counter", "input/"))}


def _assert_same(got, want):
    assert sorted(got) == sorted(want) and len(want) > 10
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def _export(checkpoint, export_dir, head, max_seq_length):
    from albert_tf.bin import export

    if "format" not in FLAGS:
        export._define_flags()
    _main(export, "albert-export", [f"--checkpoint={checkpoint}", f"--export_dir={export_dir}", f"--head={head}",
                                    "--notext_signatures", "--version=1", "--format=savedmodel",
                                    f"--max_seq_length={max_seq_length}"])
    return f"{export_dir}/1"


def _ids_for(spec, rows=2):
    """Ids for one input of a signature, of its shape (batch `rows`, 2 choices where a middle dimension is free,
    length 12): [CLS] pieces with a [MASK] (4) [SEP] and padding, two different rows."""
    dims = spec.shape.as_list()
    shape = [rows] + [2 if d is None else d for d in dims[1:-1]] + [12 if dims[-1] is None else dims[-1]]
    length = shape[-1]
    if "mask" in spec.name:
        row = [1] * (length - 2) + [0, 0]
    elif "segment" in spec.name or "type" in spec.name:
        row = [0] * (length // 2) + [1] * (length - length // 2)
    else:
        row = [2, 4] + [5 + (7 * i) % 60 for i in range(length - 5)] + [3, 0, 0]
    values = np.broadcast_to(np.asarray(row), shape).copy()
    values[0] = np.where(values[0] > 4, values[0] + 1, values[0])  # two different rows
    return tf.constant(values, spec.dtype)


def _assert_same_serving(got_dir, want_dir):
    got, want = tf.saved_model.load(got_dir), tf.saved_model.load(want_dir)
    assert sorted(got.signatures) == sorted(want.signatures)
    for name, signature in want.signatures.items():
        specs = signature.structured_input_signature[1]
        inputs = {key: _ids_for(spec) for key, spec in specs.items()}
        expected, answered = signature(**inputs), got.signatures[name](**inputs)
        assert sorted(answered) == sorted(expected), name
        for key, value in expected.items():
            if value.dtype.is_floating:
                np.testing.assert_allclose(answered[key].numpy(), value.numpy(), rtol=0, atol=1e-5,
                                           err_msg=f"{name}/{key}")
            else:
                np.testing.assert_array_equal(answered[key].numpy(), value.numpy(), err_msg=f"{name}/{key}")


# ------------------------------------------------------------------ runs
@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """albert-pretrain on ram:// (stopped after step 2, resumed to 4) and the same run on a local folder."""
    import flags.core_flags as albert_flags
    from albert_tf.bin import pretrain
    from albert_tf.training import reporting
    from tests.albert_tf import training_testlib as tl

    root = tmp_path_factory.mktemp("remote_pretraining")
    remote = f"ram://contract-{uuid.uuid4().hex[:8]}/pretrain"
    albert_flags.define_all_pretraining_flags()
    local = str(root / "local")
    _main(pretrain, "albert-pretrain", tl.pretrain_argv(root, local, 4))
    with pytest.MonkeyPatch.context() as monkeypatch:
        stopped = _stopped_after(2, pretrain, "albert-pretrain", tl.pretrain_argv(root, remote, 4), monkeypatch,
                                 reporting.MetricsLogger, "log", lambda self, step: step)
    assert stopped.step == 2 and stopped.checkpoint == f"{remote}/ckpt-2"
    _main(pretrain, "albert-pretrain", tl.pretrain_argv(root, remote, 4))
    return {"local": local, "remote": remote, "root": root}


@pytest.fixture(scope="module")
def finetuned(contract_assets, finetuned_heads):
    """head name -> {"local", "remote"}: albert-finetune's uninterrupted run on a local folder (`finetuned_heads`,
    read only) and the same command on ram:// (stopped after step 5, then resumed), made on first use."""
    from albert_tf.bin import finetune
    from albert_tf.tasks import callbacks as cb

    made = {}

    def get(name):
        if name not in made:
            data, local = finetuned_heads[name]["data"], finetuned_heads[name]["run"]
            remote = f"ram://contract-{uuid.uuid4().hex[:8]}/{name}"
            finetune._define_flags()
            argv = finetune_argv(HEADS[name], data, remote, contract_assets)
            with pytest.MonkeyPatch.context() as monkeypatch:
                stopped = _stopped_after(5, finetune, "albert-finetune", argv, monkeypatch, cb.ProgressLogger,
                                         "on_train_batch_end",
                                         lambda self, *a: int(self.model.optimizer.iterations.numpy()))
            assert stopped.step == 5 and stopped.checkpoint.startswith(f"{remote}/{cb.RESUME_DIR}/"), stopped
            _main(finetune, "albert-finetune", argv)  # resumes from ram://
            made[name] = {"local": local, "remote": remote}
        return made[name]

    return get


@pytest.mark.parametrize("row", ROWS)
def test_remote_folder(row, request, tmp_path):
    from albert_tf.tasks import callbacks as cb

    if row in PRETRAINING_ROWS:
        run = request.getfixturevalue("pretrained")
        want = _checkpoint(tf.train.latest_checkpoint(run["local"]))
        got = _checkpoint(f"{run['remote']}/ckpt-4")
        assert int(got["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 4
        head, length = EXPORT_HEAD[row], 16
    else:
        run = request.getfixturevalue("finetuned")(row)
        resume = cb.RESUME_DIR
        want = _checkpoint(tf.train.latest_checkpoint(os.path.join(run["local"], resume)))
        got = _checkpoint(f"{run['remote']}/{resume}/ckpt-12")
        assert int(got["batches/.ATTRIBUTES/VARIABLE_VALUE"]) == 12
        head, length = EXPORT_HEAD.get(row, "classifier"), 32
    _assert_same(got, want)  # weights, optimizer slots and step, dropout seeds, data position
    exported = _export(run["remote"], f"{run['remote']}-exports/{row}", head, length)
    assert tf.io.gfile.exists(f"{exported}/saved_model.pb")
    _assert_same_serving(exported, _export(run["local"], str(tmp_path / "exports"), head, length))
