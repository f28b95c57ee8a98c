"""Subprocess entry for the training tests: one pretraining run in a fresh
TensorFlow process (logical CPU devices and TF_CONFIG must be set before TF
initialises, and a run must be killable).

usage: python tests/albert_tf/training_worker.py JSON_ARGS
JSON keys: data, output_dir, steps, batch, accum, strategy ("default",
"mirrored", "multi_worker_mirrored"), logical_cpus, die_after_step,
save_steps, dropout, dump (npz path for the final weights), lr, warmup,
max_train_seconds.
mode "fit_step" (keys: init, batch_file, dump, logical_cpus, strategy): one
`AlbertPretrainer.fit` step with SGD(learning_rate=1) from the weights in
the npz `init` on the one global batch in the npz `batch_file`; dumps the
weights, the reported loss and the replica count.
"""

import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def fit_step(args):
    """One Keras fit step under the requested strategy (see the docstring)."""
    import keras

    import training_testlib as tl
    from albert_tf import AlbertPretrainer, runtime

    strategy = runtime.get_strategy(args.get("strategy", "default"))
    init = dict(np.load(args["init"]))
    batch = dict(np.load(args["batch_file"]))
    with strategy.scope():
        model = AlbertPretrainer(tl.tiny_config())
        for var in model.weights:
            var.assign(init[var.path])
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    dataset = tf.data.Dataset.from_tensor_slices(batch).batch(
        len(batch["input_ids"]))
    history = model.fit(dataset, epochs=1, verbose=0, shuffle=False).history
    weights = {v.path: np.asarray(v.numpy()) for v in model.weights}
    np.savez(args["dump"], replicas=strategy.num_replicas_in_sync,
             reported_loss=history["loss"][-1],
             reported_mlm_loss=history["mlm_loss"][-1], **weights)


def main(args):
    if args.get("logical_cpus", 1) > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args["logical_cpus"])
    if args.get("mode") == "fit_step":
        return fit_step(args)
    from absl import logging

    import training_testlib as tl
    from albert_tf import training

    logging.set_verbosity(logging.INFO)
    strategy = training.get_strategy(args.get("strategy", "default"))
    config = tl.tiny_config(hidden_dropout_prob=args.get("dropout", 0.0),
                            attention_probs_dropout_prob=args.get("dropout", 0.0))
    die = args.get("die_after_step")

    def callback(metrics):
        if die is not None and metrics["step"] >= die:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, like a crash

    result = training.run_pretraining(
        config, tl.make_dataset_fn(args["data"], args["batch"]),
        args["output_dir"], **tl.pretraining_kwargs(
            train_batch_size=args["batch"], num_train_steps=args["steps"],
            num_warmup_steps=args.get("warmup", 2),
            learning_rate=args.get("lr", 0.01),
            gradient_accumulation_steps=args.get("accum", 1),
            save_checkpoints_steps=args.get("save_steps", 2), log_steps=1,
            max_seq_length=tl.SEQ, max_predictions_per_seq=tl.PREDS,
            strategy=strategy, seed=args.get("seed", 7),
            log_callback=callback,
            max_train_seconds=args.get("max_train_seconds")))
    if args.get("dump"):
        # This worker's copy of every weight; replica copies must agree.
        weights = {}
        for var in result["model"].weights:
            copies = [np.asarray(c.numpy()) for c in
                      getattr(var.value, "values", (var.value,))]
            for copy in copies[1:]:
                np.testing.assert_array_equal(copy, copies[0], err_msg=var.path)
            weights[var.path] = copies[0]
        np.savez(args["dump"], replicas=len(copies), **weights)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
