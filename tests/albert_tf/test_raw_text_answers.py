"""`model.answer(...)`: raw text in Python, the export's answers out (issue 37 item 6).

Every head that answers text (classifier, span QA
v1 and v2 with its no-answer threshold, tagging, multiple choice, the
pretrainer's fill-mask) is compared with its SavedModel, written by
`export_saved_model` and loaded with `tf.saved_model.load`, on the shared
edge texts (tests/contracts/edge_texts.py): strings and integers equal,
floats to 1e-5 (the export freezes its weights). The models are built in
Python here (tests/contracts/test_finetuned_exports.py compares the
albert-finetune folders' answers); the fill-mask row is only here. The
classifier's label mapping is checked once by hand (head weights set so the
probabilities are known), through save_task_model / load_task_model (the
names from task_config.json), and a model that answered is freed with its
serving module.
"""

import math
import os

import numpy as np
import pytest

from tests.contracts import edge_texts as edge
from tests.contracts.test_exports import LABELS, MAX_LEN, QA_MAX_ANSWER, TAGS, _randomize, assert_close

def _build(spm, names=None):
    import keras
    import tensorflow as tf

    import albert_tf
    from tests.albert_tf.task_testlib import tiny_config

    keras.utils.set_random_seed(5)
    config = tiny_config()
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=MAX_LEN)
    qa = dict(preprocessor=pre, max_query_length=8, doc_stride=5, max_answer_length=QA_MAX_ANSWER)
    makers = {
        "pretrainer": lambda: albert_tf.AlbertPretrainer(config),
        "classifier": lambda: albert_tf.AlbertClassifier(config, 3, preprocessor=pre, label_names=LABELS),
        "span_qa_v1": lambda: albert_tf.AlbertSpanQA(config, **qa),
        "span_qa_v2": lambda: albert_tf.AlbertSpanQA(config, version_2=True, **qa),
        "multiple_choice": lambda: albert_tf.AlbertMultipleChoice(config, 3, preprocessor=pre, max_qa_length=8),
        "tagging": lambda: albert_tf.AlbertTokenClassifier(config, len(TAGS), preprocessor=pre, tag_names=TAGS),
    }
    models = {}
    for i, (name, make) in enumerate(makers.items()):
        if names is None or name in names:
            models[name] = _randomize(make(), seed=20 + i)
    if "tagging" in models:
        # A random tagger puts nearly every piece in one tag; centred logits make the tags vary.
        texts = tf.constant(edge.TEXTS)
        mask = pre(texts)["input_mask"].numpy() > 0
        bias = models["tagging"].head_variable_map()["cls/tagging/output_bias"]
        bias.assign(bias.numpy() - models["tagging"](texts).numpy()[mask].mean(axis=0))
    return models


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """The tiny models, their SavedModels (loaded) and the v2 no-answer threshold both are given."""
    import albert_tf
    import tensorflow as tf
    from tests.albert_tf.task_testlib import train_tiny_spm

    root = str(tmp_path_factory.mktemp("raw_text"))
    spm = train_tiny_spm(root)
    models = _build(spm)
    odds = models["span_qa_v2"].answer(edge.QUESTIONS, edge.CONTEXTS, null_score_diff_threshold=1e9)["null_odds"]
    threshold = threshold_between(odds)
    loaded = {}
    for name, model in models.items():
        settings = {"spm_model_file": spm} if name == "pretrainer" else {}
        if name == "span_qa_v2":
            settings["null_score_diff_threshold"] = threshold
        loaded[name] = tf.saved_model.load(
            albert_tf.export_saved_model(model, os.path.join(root, name), **settings))
    return {"models": models, "loaded": loaded, "spm": spm, "threshold": threshold, "root": root}


def _served(loaded, **inputs):
    import tensorflow as tf

    outputs = loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in inputs.items()})
    return {key: value.numpy() for key, value in outputs.items()}


def assert_answers_equal(got, served, what):
    """`answer`'s outputs == the SavedModel's: same names, strings and integers equal, floats to 1e-5 (a check
    that zeros or shuffled rows fail)."""
    assert sorted(got) == sorted(served), (what, sorted(got), sorted(served))
    for key, want in served.items():
        if want.dtype.kind in "SO":
            want = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(want)
            assert np.asarray(got[key]).tolist() == want.tolist(), f"{what}: {key}"
        elif want.dtype.kind == "f":
            assert_close(got[key], want, what=f"{what}: {key}")
        else:
            np.testing.assert_array_equal(got[key], want, err_msg=f"{what}: {key}")


@pytest.mark.parametrize("name", ["classifier", "tagging"])
def test_texts_answer_as_the_saved_model(heads, name):
    got = heads["models"][name].answer(edge.TEXTS)
    assert_answers_equal(got, _served(heads["loaded"][name], text=edge.TEXTS), name)


def test_labels_and_tags_are_the_models_names(heads):
    labels = set(heads["models"]["classifier"].answer(edge.TEXTS)["label"].tolist())
    assert labels <= set(LABELS) and len(labels) > 1, labels
    tags = set(heads["models"]["tagging"].answer(edge.TEXTS)["tags"].ravel().tolist())
    assert tags - {""} <= set(TAGS) and len(tags - {""}) > 1, tags


def test_span_qa_v1_answers_with_character_offsets_as_the_saved_model(heads):
    got = heads["models"]["span_qa_v1"].answer(edge.QUESTIONS, edge.CONTEXTS)
    assert_answers_equal(got, _served(heads["loaded"]["span_qa_v1"], text=edge.QUESTIONS, text_pair=edge.CONTEXTS),
                         "span_qa_v1")
    answered = [i for i in range(len(edge.CONTEXTS)) if got["start_char"][i] >= 0]
    assert len(answered) >= len(edge.CONTEXTS) - 1  # only the empty context has no answer
    for i in answered:  # the answer is the context's own text at its offsets
        assert got["answer"][i] == edge.CONTEXTS[i][got["start_char"][i]:got["end_char"][i]] != ""


def threshold_between(odds) -> float:
    """A v2 no-answer threshold that answers some questions and not others, far from every question's null odds:
    the middle of the widest gap between two neighbouring odds. (The median was one question's own odds: a tie
    that the SavedModel's float rounding, which differs by CPU, broke either way.)

    >>> threshold_between([0.3, -1.0, 0.31, 2.0])
    1.155
    """
    ordered = np.sort(np.asarray(odds, np.float64))
    gaps = np.diff(ordered)
    widest = int(np.argmax(gaps))
    assert gaps[widest] > 1e-3, f"the null odds are all within 1e-3 of each other: {ordered}"
    return float((ordered[widest] + ordered[widest + 1]) / 2)


def test_span_qa_v2_no_answer_threshold_as_the_saved_model(heads):
    got = heads["models"]["span_qa_v2"].answer(edge.QUESTIONS, edge.CONTEXTS,
                                               null_score_diff_threshold=heads["threshold"])
    assert_answers_equal(got, _served(heads["loaded"]["span_qa_v2"], text=edge.QUESTIONS, text_pair=edge.CONTEXTS),
                         "span_qa_v2")
    above = got["null_odds"] > heads["threshold"]
    assert above.any() and not above.all(), got["null_odds"]
    assert all(got["answer"][above] == "") and all(got["start_char"][above] == -1), got


def test_multiple_choice_answers_as_the_saved_model(heads):
    got = heads["models"]["multiple_choice"].answer(edge.QUESTIONS, choices=edge.CHOICES)
    assert_answers_equal(got, _served(heads["loaded"]["multiple_choice"], text=edge.QUESTIONS, choices=edge.CHOICES),
                         "multiple_choice")


def test_fill_mask_answers_as_the_saved_model(heads):
    got = heads["models"]["pretrainer"].answer(edge.FILL_MASK, heads["spm"])
    assert_answers_equal(got, _served(heads["loaded"]["pretrainer"], text=edge.FILL_MASK), "fill-mask")


def _set_head(clf, probabilities):
    """Zero output weights and log-probability biases: every text gets exactly `probabilities`."""
    head = clf.head_variable_map()
    head["output_weights"].assign(np.zeros(head["output_weights"].shape, np.float32))
    head["output_bias"].assign(np.log(np.asarray(probabilities, np.float32)))


def test_classifier_label_mapping_by_hand_through_a_saved_folder(heads):
    import albert_tf

    clf = _build(heads["spm"], ["classifier"])["classifier"]
    _set_head(clf, [0.125, 0.75, 0.125])  # "neutral": the middle name, not the first or the last
    folder = albert_tf.save_task_model(clf, os.path.join(heads["root"], "hand_worked"))
    loaded = albert_tf.load_task_model(folder)
    for model in (clf, loaded):
        got = model.answer(["ka lo mi", "ten"])
        assert got["label"].tolist() == ["neutral", "neutral"], got
        np.testing.assert_allclose(got["probabilities"], [[0.125, 0.75, 0.125]] * 2, atol=1e-6)
        np.testing.assert_allclose(got["logits"][0], [math.log(0.125), math.log(0.75), math.log(0.125)], atol=1e-6)
    # New weights show in the next call (the serving code reads the variables; built once per model).
    _set_head(loaded, [0.6, 0.1, 0.3])
    got = loaded.answer(["ka lo mi"])
    assert got["label"].tolist() == ["negative"] and np.allclose(got["probabilities"], [[0.6, 0.1, 0.3]]), got


_FREED = r"""
import gc, sys, weakref
import albert_tf
from tests.albert_tf.task_testlib import tiny_config, train_tiny_spm
pre = albert_tf.AlbertTextPreprocessor(train_tiny_spm(sys.argv[1]), max_seq_length=32)
for answers in (False, True):
    clf = albert_tf.AlbertClassifier(tiny_config(), 3, preprocessor=pre)
    if answers:
        clf.answer(["ka lo"])
    ref = weakref.ref(clf)
    del clf
    gc.collect()
    print(answers, ref() is None)
"""


def test_a_model_that_answered_is_freed(tmp_path):
    """The serving module is kept on the model, not in a global table whose values keep every model alive (a
    fresh process: pytest's captured log records hold traced functions)."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=repo)
    done = subprocess.run([sys.executable, "-c", _FREED, str(tmp_path)], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "True", "True", "True"], done.stdout


@pytest.mark.parametrize("call, message", [
    (lambda m: m["span_qa_v1"].answer(["what?"]), "answers ['text', 'text_pair']; got ['text']"),
    (lambda m: m["multiple_choice"].answer(["ctx"]), "answers ['text', 'choices']; got ['text']"),
    (lambda m: m["classifier"].answer(["a"], max_answer_lenght=3), "no setting max_answer_lenght=3"),
    (lambda m: __import__("albert_tf").export.answer(m["pretrainer"], ["a [MASK]"]), "pass spm_model_file"),
])
def test_refusals_are_one_line_and_quote_the_value(heads, call, message):
    with pytest.raises(ValueError) as info:
        call(heads["models"])
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)
