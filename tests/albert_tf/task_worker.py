"""Subprocess entry of the task-model distribution tests: one optimizer step
of `fit` under MirroredStrategy over 2 logical CPUs and under the default
strategy, from the same weights on the same global batch.

The step is plain SGD, so the weight change is linear in the gradient and the
difference between the two runs is the gradient's float32 reduction-order
error times the learning rate. (An Adam step is not: near g = 0 its update has
slope lr / epsilon, so it magnifies round-off by orders of magnitude and the
bound would depend on the machine's kernels.)

usage: python tests/albert_tf/task_worker.py OUT_JSON TASK...
TASK: "classifier"; "tagging" (whose two replicas hold different numbers of
labelled tokens, so a mean of per-replica means would differ); "span_v2"
(the end logits conditioned on the gold start inside each replica);
"classifier_text" (raw strings: SentencePiece runs in every replica).
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def _batch(task):
    if task == "classifier_text":
        return (np.array(["ka lo mi", "ten", "ser qua vi don ka", ""]), np.array([0, 1, 1, 0], np.int32))
    rng = np.random.default_rng(3)
    ids = rng.integers(5, 120, size=(4, 6)).astype(np.int32)
    ids[:, 0] = 2
    mask = np.ones_like(ids)
    mask[2:, 4:] = 0  # the second replica's rows are shorter
    x = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    if task == "classifier":
        y = np.array([0, 1, 2, 1], np.int32)
    elif task == "span_v2":
        x["segment_ids"][:, 2:] = 1
        y = {"start_positions": np.array([2, 3, 0, 2], np.int32), "end_positions": np.array([3, 5, 0, 3], np.int32),
             "is_impossible": np.array([0, 0, 1, 0], np.int32)}
    else:
        y = rng.integers(0, 3, size=(4, 6)).astype(np.int32)
        y[:2, 1:] = -1  # replica 0: 2 labelled tokens; replica 1: 8
    return x, y


def _make(task):
    import albert_tf
    from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm

    if task == "classifier":
        return albert_tf.AlbertClassifier(tiny_config(), 3, dropout_rate=0.0)
    if task == "classifier_text":
        if "spm" not in _SPM:
            import tempfile
            _SPM["spm"] = train_tiny_spm(tempfile.mkdtemp())
        pre = albert_tf.AlbertTextPreprocessor(_SPM["spm"], max_seq_length=8)
        return albert_tf.AlbertClassifier(tiny_config(), 2, preprocessor=pre, dropout_rate=0.0)
    if task == "span_v2":
        return albert_tf.AlbertSpanQA(tiny_config(), version_2=True, dropout_rate=0.0)
    return albert_tf.AlbertTokenClassifier(tiny_config(), 3, dropout_rate=0.0)


_SPM = {}


def one_step(task, strategy, initial):
    import keras

    with strategy.scope():
        model = _make(task)
        if initial is not None:
            model.set_weights(initial)
        metrics = None if task == "span_v2" else ["accuracy"]
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), metrics=metrics)
    x, y = _batch(task)
    history = model.fit(tf.data.Dataset.from_tensors((x, y)), epochs=1, verbose=0)
    return model, history.history


def main(out_path, tasks):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    results = {task: compare(task, mirrored) for task in tasks}
    with open(out_path, "w") as f:
        json.dump(results, f)


def compare(task, mirrored):
    initial = _initial_for(task)
    model_a, hist_a = one_step(task, mirrored, initial)
    model_b, hist_b = one_step(task, tf.distribute.get_strategy(), initial)
    diffs = [float(np.max(np.abs(a - b))) for a, b in zip(model_a.get_weights(), model_b.get_weights())]
    moved = [float(np.max(np.abs(a - b))) for a, b in zip(model_b.get_weights(), initial)]
    largest = max(float(np.max(np.abs(w))) for w in model_b.get_weights())
    return {"replicas": mirrored.num_replicas_in_sync, "max_weight_diff": max(diffs),
            "max_weight_change": max(moved), "max_abs_weight": largest, "loss_mirrored": hist_a["loss"][0],
            "loss_default": hist_b["loss"][0], "accuracy_mirrored": hist_a.get("accuracy", [0.0])[0],
            "accuracy_default": hist_b.get("accuracy", [0.0])[0]}


_INITIAL = {}


def _initial_for(task):
    """Fixed initial weights (built once, outside any strategy)."""
    if task not in _INITIAL:
        rng = np.random.default_rng(0)
        model = _make(task)
        _INITIAL[task] = [(rng.normal(size=w.shape) * 0.1).astype(np.float32) for w in model.get_weights()]
    return _INITIAL[task]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
