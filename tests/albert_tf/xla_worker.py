"""Subprocess entry of the XLA tests under MirroredStrategy over 2 logical CPU devices (they must be
configured before TensorFlow initialises, hence a fresh process).

usage: python tests/albert_tf/xla_worker.py JSON_ARGS
JSON keys: data (a TFRecord glob), result (a JSON path), runs (a list of pretraining runs, each a dict of
output_dir, weights (an npz path), jit_compile, jit_whole_step, broadcast_in_place: from this run on, see
`update_only_first_replica_variables_in_place`), gpu_path (see `take_the_gpu_path`), finetune_jit (a dict of
data_dir, spm and config: albert-finetune's runner with --jit_compile under --strategy=mirrored). The result holds
the replica count and, per run, the error (type: message) or nothing; the fine-tuning run's error.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def take_the_gpu_path(strategy):
    """Makes MirroredStrategy on CPU devices take its multi-GPU XLA path.

    On GPUs, TensorFlow compiles the all-reduce into the XLA program (no
    merge_call, NCCL/auto collectives: mirrored_strategy._use_merge_call);
    on CPU devices it never does. Here it is made to, so that the whole
    step is built and compiled as on GPUs, up to the one thing the CPU
    backend lacks: XLA collectives.
    """
    from tensorflow.python.distribute import collective_util
    from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib
    from tensorflow.python.distribute import mirrored_run, mirrored_strategy

    from albert_tf.training import step

    mirrored_strategy._is_gpu_device = mirrored_run._is_gpu_device = lambda device: True
    extended = strategy.extended
    options = collective_util.Options(implementation=collective_util.CommunicationImplementation.AUTO)
    extended._communication_options = options
    extended._collective_ops = cross_device_ops_lib.CollectiveAllReduce(
        devices=extended._devices, group_size=len(extended._devices), options=options,
        collective_keys=extended._collective_keys)
    step.whole_step_xla_supported = lambda strategy: True


def update_only_first_replica_variables_in_place():
    """Lets a replica update a variable of aggregation ONLY_FIRST_REPLICA without merge_call.

    TensorFlow broadcasts the first replica's value through merge_call even
    on its multi-GPU XLA path, which fails inside the compiled program: the
    Keras optimizers' step counter is such a variable (keras-team/keras#17187).
    Every replica adds the same 1, so updating each copy in place is exact.
    """
    from tensorflow.python.distribute import values
    from tensorflow.python.ops import variables

    original = values.apply_aggregation_replica_context

    def apply(value, aggregation, destinations):
        if aggregation == variables.VariableAggregation.ONLY_FIRST_REPLICA:
            return value
        return original(value, aggregation, destinations)

    values.apply_aggregation_replica_context = apply


def pretrain(args, run, strategy):
    """One 3-step pretraining run; its weights (replica copies checked equal) to run["weights"]."""
    import training_testlib as tl
    from albert_tf import training

    result = training.run_pretraining(
        tl.tiny_config(), tl.make_dataset_fn(args["data"], 8), run["output_dir"], **tl.pretraining_kwargs(
            train_batch_size=8, num_train_steps=3, num_warmup_steps=1, learning_rate=0.01,
            save_checkpoints_steps=10, log_steps=1, max_seq_length=tl.SEQ, max_predictions_per_seq=tl.PREDS,
            seed=11, gradient_accumulation_steps=2, jit_compile=run.get("jit_compile", False),
            jit_whole_step=run.get("jit_whole_step", False), strategy=strategy))
    weights = {}
    for var in result["model"].weights:
        copies = [np.asarray(c.numpy()) for c in getattr(var.value, "values", (var.value,))]
        assert len(copies) == 2, var.path
        np.testing.assert_array_equal(copies[1], copies[0], err_msg=var.path)
        weights[var.path] = copies[0]
    np.savez(run["weights"], **weights)


def finetune_jit(settings):
    """albert-finetune's runner with --jit_compile under --strategy=mirrored (it refuses before reading data)."""
    from albert_tf.tasks import FinetuneOptions, TaskOptions, run_finetuning

    run_finetuning(FinetuneOptions("glue/sst-2", settings["data_dir"], settings["data_dir"] + "/out",
                                   albert_config_file=settings["config"], strategy="mirrored", jit_compile=True,
                                   do_train=True,
                                   task_options=TaskOptions(spm_model_file=settings["spm"], max_seq_length=32)))


def _error(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # reported to the test, which checks what failed and why
        return f"{type(e).__name__}: {e}"
    return None


def main(args):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    if args.get("gpu_path"):
        take_the_gpu_path(strategy)
    result = {"replicas": strategy.num_replicas_in_sync, "runs": []}
    for run in args.get("runs", []):
        if run.get("broadcast_in_place"):
            update_only_first_replica_variables_in_place()
        result["runs"].append(_error(pretrain, args, run, strategy))
    if args.get("finetune_jit"):
        result["finetune_jit"] = _error(finetune_jit, args["finetune_jit"])
    with open(args["result"], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
