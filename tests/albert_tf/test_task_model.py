"""The task-model base: input forms, from_pretrained, global loss
denominators under MirroredStrategy (fresh subprocess), mixed precision."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.models import task_model
from tests.albert_tf.task_testlib import sentences, tiny_config, train_tiny_spm

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("spm")))


@pytest.fixture(scope="module")
def classifier(spm_model):
    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16)
    return albert_tf.AlbertClassifier(tiny_config(), 3, preprocessor=pre)


def test_every_input_form_gives_the_same_logits(classifier):
    texts, pairs = tf.constant(["Ka lo mi", "ten"]), tf.constant(["ser qua", ""])
    ids = classifier.preprocessor(texts, pairs)
    want = classifier(ids).numpy()
    np.testing.assert_allclose(classifier((texts, pairs)).numpy(), want, atol=1e-6)
    np.testing.assert_allclose(classifier({"text": texts, "text_pair": pairs}).numpy(), want, atol=1e-6)
    single = classifier.preprocessor(texts)
    np.testing.assert_allclose(classifier(texts).numpy(), classifier(single).numpy(), atol=1e-6)
    np.testing.assert_allclose(classifier.predict(["Ka lo mi", "ten"], verbose=0),
                               classifier(single).numpy(), atol=1e-6)
    np.testing.assert_allclose(classifier.predict((["Ka lo mi", "ten"], ["ser qua", ""]), verbose=0),
                               want, atol=1e-6)


def test_text_without_preprocessor_and_bad_inputs_are_explained():
    clf = albert_tf.AlbertClassifier(tiny_config(), 2)
    with pytest.raises(ValueError, match="has no preprocessor"):
        clf(tf.constant(["a"]))
    with pytest.raises(ValueError, match="got keys \\['ids'\\]"):
        clf({"ids": tf.constant([[2, 3]])})
    with pytest.raises(ValueError, match="num_classes must be >= 1.*got 0"):
        albert_tf.AlbertClassifier(tiny_config(), 0)


def test_global_sum_outside_a_strategy_is_identity():
    assert float(task_model.global_sum(tf.constant(3.0))) == 3.0


def test_from_pretrained_loads_the_encoder_and_finds_spm(tmp_path, spm_model):
    pre = albert_tf.AlbertPretrainer(tiny_config())
    folder = albert_tf.save_pretrained(pre, str(tmp_path / "pre"), spm_model_file=spm_model)
    clf = albert_tf.AlbertClassifier.from_pretrained(folder, 4, max_seq_length=12, label_names=list("abcd"))
    for a, b in zip(clf.encoder.get_weights(), pre.encoder.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert clf.preprocessor is not None and clf.preprocessor.max_seq_length == 12
    assert clf.task_config == {"task_type": "classification", "num_classes": 4, "label_names": list("abcd"),
                               "dropout_rate": 0.1, "max_seq_length": 12, "do_lower_case": True,
                               "normalization": "original", "pooling": "pooled", "text_pairs": None}
    assert clf(tf.constant(["ka lo"])).shape == (1, 4)
    assert task_model.find_spm_model(folder) == os.path.join(folder, "spm.model")


# float32 unit round-off.
_U32 = 2.0 ** -24
# Summands behind one gradient entry, rounded up: 4 rows x 8 positions of the
# batch, times the widest inner product of the tiny config (intermediate 32),
# times its 2 layers sharing one set of weights: 4 * 8 * 32 * 2 = 2048.
_SUMMANDS = 2048


def _reduction_order_bound(result) -> float:
    """Largest weight difference that summation order alone can explain.

    Two orders of the same float32 sum of n terms differ by at most
    gamma_n = n*u / (1 - n*u) relative to the sum of magnitudes; with SGD the
    weight step is lr * gradient, so the steps differ by at most gamma_n times
    the largest step. Storing w + step rounds once more in each run: u * |w|.
    With n = 2048 the step term is 1.2e-4 of the step. A mean of per-replica
    means instead of the global mean changes the step by tens of percent (the
    tagging case weights a token by 1/4 on one replica, 1/16 on the other,
    1/10 in the global mean), far above this bound.
    """
    gamma = _SUMMANDS * _U32 / (1.0 - _SUMMANDS * _U32)
    return gamma * result["max_weight_change"] + _U32 * result["max_abs_weight"]


def test_fit_under_mirrored_strategy_equals_the_default_strategy(tmp_path):
    """One step of fit on 2 logical CPUs == one step on one device, same batch.

    The tagging case puts 2 labelled tokens on one replica and 8 on the
    other: only a global denominator makes the two runs agree. span_v2 checks
    the teacher-forced head per replica, classifier_text a classifier on raw
    strings (SentencePiece in every replica).
    """
    out = tmp_path / "result.json"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "task_worker.py"), str(out), "tagging",
                           "span_v2", "classifier_text"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert sorted(results) == ["classifier_text", "span_v2", "tagging"]
    for name, r in results.items():
        assert r["replicas"] == 2, name
        assert r["max_weight_change"] > 1e-4, name  # the step did move the weights
        assert r["max_weight_diff"] <= _reduction_order_bound(r), (name, r)
        assert r["loss_mirrored"] == pytest.approx(r["loss_default"], rel=1e-5), (name, r)
        assert r["accuracy_mirrored"] == pytest.approx(r["accuracy_default"]), (name, r)


def test_fit_under_mixed_bfloat16(spm_model):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16)
        clf = albert_tf.AlbertClassifier(tiny_config(), 2, preprocessor=pre)
        assert clf.encoder.compute_dtype == "bfloat16"
        texts, labels = sentences(16)
        clf.compile(optimizer=albert_tf.optimizers.adamw(1e-3))
        history = clf.fit(tf.data.Dataset.from_tensor_slices((texts, labels)).batch(8), epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
        assert clf(tf.constant(texts[:2])).dtype == tf.float32
        assert all(v.dtype == "float32" for v in clf.trainable_variables)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_get_config_round_trip(classifier):
    config = json.loads(json.dumps(classifier.get_config()))
    again = albert_tf.AlbertClassifier.from_config(config)
    assert again.num_classes == 3 and again.preprocessor.max_seq_length == 16
    again.set_weights(classifier.get_weights())
    text = tf.constant(["ka lo mi"])
    np.testing.assert_allclose(again(text).numpy(), classifier(text).numpy(), atol=1e-6)
