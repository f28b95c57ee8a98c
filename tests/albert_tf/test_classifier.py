"""AlbertClassifier: the head's maths, the losses against NumPy, fit/predict on strings."""

import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from tests.albert_tf.task_testlib import sentences, tiny_config, train_tiny_spm


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("spm")))


def _ids():
    ids = tf.constant([[2, 17, 43, 3, 0], [2, 9, 3, 8, 3]])
    return {"input_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
            "segment_ids": tf.constant([[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]])}


def test_logits_are_the_pooled_output_times_output_weights():
    clf = albert_tf.AlbertClassifier(tiny_config(), 3)
    x = _ids()
    pooled = clf.encoder(x)["pooled_output"].numpy()
    w = clf.head.output_weights.numpy()
    b = clf.head.output_bias.numpy()
    assert w.shape == (3, 16)
    np.testing.assert_allclose(clf(x).numpy(), pooled @ w.T + b, atol=1e-6)


def test_cross_entropy_and_squared_error_against_numpy():
    clf = albert_tf.AlbertClassifier(tiny_config(), 3)
    logits = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], np.float32)
    labels = np.array([1, 0])
    total, count = clf.loss_terms(None, tf.constant(labels), tf.constant(logits))
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert float(count) == 2
    assert float(total) == pytest.approx(-(log_p[0, 1] + log_p[1, 0]), rel=1e-6)
    reg = albert_tf.AlbertClassifier(tiny_config(), 1)
    assert reg.is_regression
    total, count = reg.loss_terms(None, tf.constant([0.5, 4.0]), tf.constant([[1.0], [2.0]]),
                                  sample_weight=tf.constant([1.0, 0.5]))
    assert float(total) == pytest.approx(0.25 + 0.5 * 4.0)


def test_fit_predict_and_evaluate_on_strings(spm_model):
    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16)
    clf = albert_tf.AlbertClassifier(tiny_config(), 2, preprocessor=pre, label_names=["no", "yes"])
    texts, labels = sentences(48)
    data = tf.data.Dataset.from_tensor_slices((texts, labels)).batch(16)
    clf.compile(optimizer=albert_tf.optimizers.adamw(1e-3), metrics=["accuracy"])
    before = clf.evaluate(data, verbose=0, return_dict=True)
    # The reported loss is the mean cross-entropy over the whole set.
    logits = clf.predict(texts, verbose=0)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert before["loss"] == pytest.approx(-np.mean(log_p[np.arange(48), labels]), rel=1e-4)
    history = clf.fit(data, epochs=2, verbose=0)
    assert history.history["loss"][-1] < before["loss"]
    # Python lists work as well as datasets: fit, evaluate and predict, pairs too.
    history = clf.fit(texts, labels, batch_size=16, epochs=1, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][0])
    loss, _ = clf.evaluate((texts, texts[::-1]), labels, batch_size=16, verbose=0)
    pair_logits = clf.predict((texts, texts[::-1]), batch_size=16, verbose=0)
    log_p = pair_logits - np.log(np.exp(pair_logits).sum(-1, keepdims=True))
    assert loss == pytest.approx(-np.mean(log_p[np.arange(48), labels]), rel=1e-4)
    np.testing.assert_allclose(clf.predict(np.array(texts), verbose=0), clf.predict(texts, verbose=0), atol=1e-6)


def test_regression_fits_float_labels(spm_model):
    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16)
    reg = albert_tf.AlbertClassifier(tiny_config(), 1, preprocessor=pre)
    texts, labels = sentences(16)
    data = tf.data.Dataset.from_tensor_slices((texts, labels.astype(np.float32) * 5.0)).batch(8)
    reg.compile(optimizer=albert_tf.optimizers.adamw(1e-2))
    before = reg.evaluate(data, verbose=0)
    preds = reg.predict(texts, verbose=0)[:, 0]
    assert before == pytest.approx(np.mean((preds - labels * 5.0) ** 2), rel=1e-4)
    reg.fit(data, epochs=3, verbose=0, shuffle=False)
    assert reg.evaluate(data, verbose=0) < before



def test_a_loss_given_to_compile_replaces_the_default():
    clf = albert_tf.AlbertClassifier(tiny_config(), 3)
    x, y = _ids(), np.array([2, 0])
    data = tf.data.Dataset.from_tensors((x, y))
    clf.compile(optimizer=albert_tf.optimizers.adamw(1e-3))
    default = clf.evaluate(data, verbose=0)
    clf.compile(optimizer=albert_tf.optimizers.adamw(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert clf.evaluate(data, verbose=0) == pytest.approx(default, rel=1e-5)
    clf.compile(optimizer=albert_tf.optimizers.adamw(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), loss_weights=2.0)
    assert clf.evaluate(data, verbose=0) == pytest.approx(2 * default, rel=1e-5)


def test_mean_pooling_is_the_masked_mean_against_numpy(tmp_path):
    clf = albert_tf.AlbertClassifier(tiny_config(), 3, pooling="mean")
    x = _ids()  # row 0 has one padding position
    seq = clf.encoder(x)["sequence_output"].numpy().astype(np.float64)
    mask = x["input_mask"].numpy().astype(np.float64)
    mean = (seq * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    w, b = clf.head.output_weights.numpy(), clf.head.output_bias.numpy()
    want = mean @ w.T + b
    np.testing.assert_allclose(clf(x).numpy(), want, atol=1e-5)
    np.testing.assert_allclose(clf.predict(x, verbose=0), want, atol=1e-5)  # the inference path
    # Not the pooler's [CLS] output, and more padding changes nothing.
    pooled = clf.encoder(x)["pooled_output"].numpy()
    assert not np.allclose(clf(x).numpy(), pooled @ w.T + b, atol=1e-3)
    padded = {k: tf.pad(v, [[0, 0], [0, 4]]) for k, v in x.items()}
    np.testing.assert_allclose(clf(padded).numpy(), want, atol=1e-5)
    # Saved in task_config.json and restored.
    folder = albert_tf.save_task_model(clf, str(tmp_path / "mean"))
    again = albert_tf.load_task_model(folder)
    assert again.pooling == "mean" and again.task_config["pooling"] == "mean"
    np.testing.assert_allclose(again(x).numpy(), want, atol=1e-5)
    assert albert_tf.AlbertClassifier(tiny_config(), 2).pooling == "pooled"
    with pytest.raises(ValueError, match="pooling must be one of pooled, mean, got 'max'"):
        albert_tf.AlbertClassifier(tiny_config(), 2, pooling="max")


def test_masked_mean_of_an_all_padding_row_is_zero_and_keeps_the_dtype():
    from albert_tf.models.classifier import masked_mean

    x = tf.constant(np.arange(12, dtype=np.float32).reshape(2, 3, 2), tf.bfloat16)
    out = masked_mean(x, tf.constant([[1, 0, 1], [0, 0, 0]]))
    assert out.dtype == tf.bfloat16
    np.testing.assert_allclose(out.numpy().astype(np.float32), [[2.0, 3.0], [0.0, 0.0]])


def test_mean_pooling_leaves_the_unused_pooler_out_of_training_and_resumes():
    # Regression: with the pooler trainable, an optimizer built for a resume held slots for it that the
    # training run (no gradient there) never made, and restoring its checkpoint failed on a shape mismatch.
    clf = albert_tf.AlbertClassifier(tiny_config(), 3, pooling="mean")
    ids = np.array([[2, 7, 8, 3], [2, 9, 3, 0]], np.int32)
    features = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": np.zeros_like(ids)}
    clf(features)
    assert not any("pooler" in v.path for v in clf.trainable_variables)
    clf.compile(optimizer=keras.optimizers.Adam(1e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    clf.fit(features, np.array([0, 2]), epochs=1, verbose=0)
    ckpt = tf.train.Checkpoint(model=clf, optimizer=clf.optimizer)
    path = ckpt.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
    again = albert_tf.AlbertClassifier(tiny_config(), 3, pooling="mean")
    again(features)
    again.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    again.optimizer.build(again.trainable_variables)  # as albert-finetune's resume does
    tf.train.Checkpoint(model=again, optimizer=again.optimizer).restore(path).assert_existing_objects_matched()
    for a, b in zip(clf.trainable_variables, again.trainable_variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
