"""bench/studies/int8_accuracy.py and int8_serving.py: the peer holds our weights, and the kernel census reads
OpenVINO's runtime graph.

The accuracy study's peer is Hugging Face's AlbertModel holding a fine-tuned classifier's weights with the same
head: its logits must equal the Keras classifier's (both poolings, single texts and pairs), or the peer's accuracy
drop would be measured on another model. Skips without torch/transformers/openvino (the [bench] extra).
"""

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is in the [bench] extra")
pytest.importorskip("transformers", reason="transformers is in the [bench] extra")
ov = pytest.importorskip("openvino", reason="openvino is in the [bench] extra")

import albert_tf  # noqa: E402
from bench.studies import int8_accuracy, int8_serving  # noqa: E402


def _trained_like(classifier, seed):
    """Weights far from the initialiser (LayerNorm gammas away from 1, biases non-zero), so a mapping mistake shows."""
    rng = np.random.default_rng(seed)
    for v in classifier.weights:
        v.assign(rng.normal(0.0, 0.2, size=v.shape).astype(np.float32) + (1.0 if "gamma" in v.path else 0.0))


@pytest.mark.parametrize("pooling", ["mean", "pooled"])
def test_the_hugging_face_twin_computes_the_classifiers_logits(pooling):
    import torch

    config = albert_tf.AlbertConfig.tiny()
    classifier = albert_tf.AlbertClassifier(config, num_classes=3, pooling=pooling)
    _trained_like(classifier, seed=1 if pooling == "mean" else 2)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, config.vocab_size, size=(3, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0  # a padded row: the mean must skip its padding
    segments = np.zeros_like(ids)
    segments[2, 6:] = 1  # a pair
    features = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
    ours = classifier(features, training=False).numpy()
    with torch.no_grad():
        theirs = int8_accuracy.hf_twin(classifier)(
            *(torch.from_numpy(features[k].astype(np.int64)) for k in ("input_ids", "input_mask", "segment_ids")))
    np.testing.assert_allclose(theirs.numpy(), ours, atol=1e-5 * max(1.0, np.abs(ours).max()))
    # Guard against a twin that ignores its inputs: the three rows differ.
    assert np.abs(ours[0] - ours[1]).max() > 1e-3


def test_the_kernel_census_counts_the_dense_nodes_by_kernel_and_precision():
    from openvino import opset13 as ops

    x = ops.parameter([-1, 64], np.float32, name="x")
    first = ops.matmul(x, ops.constant(np.ones((32, 64), np.float32)), False, True)
    second = ops.matmul(ops.relu(first), ops.constant(np.ones((16, 32), np.float32)), False, True)
    compiled = ov.Core().compile_model(ov.Model([second], [x]), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    compiled({"x": np.ones((2, 64), np.float32)})
    counts = int8_serving.dense_kernels(compiled)
    assert sum(counts.values()) == 2, counts
    assert all(key.startswith(("FullyConnected: ", "MatMul: ")) and key.endswith(" f32") for key in counts), counts
    assert not any("undef" in key for key in counts), counts  # read after a call: the kernels are chosen


def test_answer_changes_counts_broken_fixed_and_changed_answers_by_hand():
    from openvino import opset13 as ops

    def model(weights):
        x = ops.parameter([-1, 3], np.float32, name="x")
        out = ops.matmul(x, ops.constant(np.asarray(weights, np.float32)), False, False)
        out.output(0).get_tensor().set_names({"logits"})
        return ov.Model([out], [x])

    identity, swap_first_two = np.eye(3), np.eye(3)[:, [1, 0, 2]]
    # Rows' float answers 0, 1, 2, 0; int8 (classes 0 and 1 swapped) answers 1, 0, 2, 1.
    items = [{"x": np.asarray([row], np.float32)} for row in ([3, 1, 0], [0, 2, 1], [0, 0, 5], [4, 2, 1])]
    labels = np.asarray([0, 0, 2, 1])  # float right, wrong, right, wrong; int8 wrong, right, right, right
    changes = int8_accuracy.answer_changes(model(identity), model(swap_first_two), items, labels)
    assert (changes["broken"], changes["fixed"], changes["changed"]) == (1, 2, 3)
    assert changes["drop_standard_error"] == pytest.approx(100.0 * np.sqrt(3) / 4)


def test_the_serving_report_gives_each_workloads_paired_ratios_by_hand():
    # Hand-worked rounds: every row 10 seq/s on full-length batches; on the real-text batch "ours int8" 30, 24, 36
    # against 10, 12, 12 for every other row -> ours int8 / any peer: 3.0, 2.0, 3.0 (median 3.00x, ahead).
    names = {name for pair in int8_serving.RATIOS for name in pair}
    results = {name: {"seq_per_s": [10.0, 10.0, 10.0], "latency_ms": [5.0, 6.0, 7.0],
                      "text_seq_per_s": [30.0, 24.0, 36.0] if name == "ours int8" else [10.0, 12.0, 12.0]}
               for name in sorted(names)}
    text = int8_serving.report(results, "# run", text_shape="batch 32 x 90")
    main, real = text.split("| ratio (batch 32 x 128 throughput")[1].split("| ratio (real text batch 32 x 90")
    assert "| ours int8 / ours float | 1.00x [1.00, 1.00] | level |" in main
    assert "| ours int8 / HF model, OpenVINO from torch, NNCF int8 | 3.00x [2.00, 3.00] | ahead |" in real
    assert "| ours float / HF graph, ONNX Runtime float | 1.00x [1.00, 1.00] | level |" in real
    assert "| ours int8 | 10.00 [10.00, 10.00] | 30.00 [24.00, 36.00] | 6.0 / 7.0 / 7.0 |" in text
    # A run without the real-text workload (before it existed) reports the full-length batches only.
    for r in results.values():
        del r["text_seq_per_s"]
    assert "real text" not in int8_serving.report(results, "# run")
