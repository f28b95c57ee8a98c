"""save_task_model / load_task_model: every task type round-trips its
predictions; load_checkpoint still reads the folder as an encoder."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    return train_tiny_spm(str(tmp_path_factory.mktemp("spm")))


def _models(pre):
    return [
        (albert_tf.AlbertClassifier(tiny_config(), 3, preprocessor=pre, label_names=["a", "b", "c"]),
         (tf.constant(["ka lo", "mi"]), tf.constant(["ten", ""]))),
        (albert_tf.AlbertClassifier(tiny_config(), 1, preprocessor=pre), tf.constant(["ka lo"])),
        (albert_tf.AlbertSpanQA(tiny_config(), preprocessor=pre), (tf.constant(["ka"]), tf.constant(["lo mi"]))),
        (albert_tf.AlbertSpanQA(tiny_config(), preprocessor=pre, version_2=True, max_query_length=4),
         (tf.constant(["ka"]), tf.constant(["lo mi ten"]))),
        (albert_tf.AlbertMultipleChoice(tiny_config(), 2, preprocessor=pre, max_qa_length=6),
         {"text": tf.constant(["ka lo"]), "choices": tf.constant([["mi", "ten ser"]])}),
        (albert_tf.AlbertTokenClassifier(tiny_config(), 4, preprocessor=pre, tag_names=list("OBIE")),
         tf.constant(["ka lo mi"])),
    ]


def test_every_task_round_trips(tmp_path, spm_model):
    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16, do_lower_case=True)
    for i, (model, inputs) in enumerate(_models(pre)):
        # Heads start at zero bias; move every weight so a missed one shows.
        rng = np.random.default_rng(i)
        model.set_weights([w + rng.normal(size=w.shape).astype(w.dtype) * 0.05 for w in model.get_weights()])
        folder = str(tmp_path / f"model_{i}")
        albert_tf.save_task_model(model, folder)
        assert sorted(os.listdir(folder)) == ["albert_config.json", "model.weights.safetensors", "spm.model",
                                              "task_config.json"]
        with open(os.path.join(folder, "task_config.json")) as f:
            assert json.load(f) == json.loads(json.dumps(model.task_config))
        again = albert_tf.load_task_model(folder)
        assert type(again) is type(model) and again.task_config == model.task_config
        want, got = model(inputs), again(inputs)
        for a, b in zip(tf.nest.flatten(want), tf.nest.flatten(got)):
            np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6)


def test_load_checkpoint_reads_the_encoder(tmp_path, spm_model):
    pre = albert_tf.AlbertTextPreprocessor(spm_model, max_seq_length=16)
    clf = albert_tf.AlbertClassifier(tiny_config(), 2, preprocessor=pre)
    folder = albert_tf.save_task_model(clf, str(tmp_path / "clf"))
    pretrainer = albert_tf.load_checkpoint(folder)
    for a, b in zip(pretrainer.encoder.get_weights(), clf.encoder.get_weights()):
        np.testing.assert_array_equal(a, b)
    # And from_pretrained on it starts a new task from the fine-tuned encoder.
    other = albert_tf.AlbertTokenClassifier.from_pretrained(folder, 3)
    np.testing.assert_array_equal(other.encoder.get_weights()[0], clf.encoder.get_weights()[0])


def test_load_errors_name_the_file(tmp_path, spm_model):
    with pytest.raises(FileNotFoundError, match="task_config.json"):
        albert_tf.load_task_model(str(tmp_path))
    clf = albert_tf.AlbertClassifier(tiny_config(), 2)
    folder = albert_tf.save_task_model(clf, str(tmp_path / "clf"), spm_model_file=spm_model)
    path = os.path.join(folder, "task_config.json")
    with open(path) as f:
        config = json.load(f)
    config["num_classes"] = 5
    with open(path, "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError, match=r"output_weights: file \(2, 16\) vs model \(5, 16\)"):
        albert_tf.load_task_model(folder)
    config["task_type"] = "poetry"
    with open(path, "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError, match="unknown task_type 'poetry'"):
        albert_tf.load_task_model(folder)
