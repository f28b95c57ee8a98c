"""`model.answer(...)`: raw text in Python, the export's answers out (issue 37 item 6).

Every head that answers text (classifier single and pair, span QA
v1 and v2 with its no-answer threshold, tagging, multiple choice, the
pretrainer's fill-mask) is compared with its SavedModel, written by
`export_saved_model` and loaded with `tf.saved_model.load`, on the shared
edge texts (tests/contracts/edge_texts.py): strings and integers equal,
floats to 1e-5 (the export freezes its weights). `answer` is called in
batches of 4, the SavedModel with the whole request, so batching is covered
too. The classifier's label mapping is checked once by hand (head weights
set so the probabilities are known), through save_task_model /
load_task_model (the names from task_config.json).
"""

import math
import os

import numpy as np
import pytest

from tests.contracts import edge_texts as edge
from tests.contracts.test_exports import LABELS, MAX_LEN, QA_MAX_ANSWER, TAGS, _randomize, assert_close

BATCH = 4


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
    # A threshold between the v2 null odds, so that some questions are answered and some are not.
    odds = [row["null_odds"] for row in models["span_qa_v2"].answer(edge.QUESTIONS, edge.CONTEXTS,
                                                                    null_score_diff_threshold=1e9)]
    threshold = float(np.median(odds))
    loaded = {}
    for name, model in models.items():
        settings = {"spm_model_file": spm} if name == "pretrainer" else {}
        if name == "span_qa_v2":
            settings["null_score_diff_threshold"] = threshold
        loaded[name] = tf.saved_model.load(
            albert_tf.export_saved_model(model, os.path.join(root, name), **settings))
    return {"models": models, "loaded": loaded, "spm": spm, "threshold": threshold, "root": root}


def _served(loaded, signature, **inputs):
    import tensorflow as tf

    outputs = loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
    return {key: value.numpy() for key, value in outputs.items()}


def _decoded(array):
    return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array) if array.dtype.kind in "SO" else array


def _flat(values):
    """Every value of a list of (nested) lists or arrays, in order."""
    return [v for value in values for v in np.ravel(np.asarray(value, dtype=object)).tolist()]


def _compare(got, want, what):
    """Equal strings and integers, floats to 1e-5 (a check that zeros or shuffled values fail)."""
    want = np.asarray(want)
    if want.dtype.kind == "f":
        assert_close(got, want, what=what)
    else:
        np.testing.assert_array_equal(np.asarray(got, dtype=want.dtype), want, err_msg=what)


def assert_rows_equal(rows, served, what, padding=()):
    """Rows of `answer` == the SavedModel's outputs: same keys, strings and integers equal, floats to 1e-5.

    Args:
        rows: `answer`'s rows.
        served: the signature's outputs (NumPy, whole request).
        what: for messages.
        padding: key -> padding value for the outputs `answer` returns without their batch's padding (the
            SavedModel pads a request to its longest row or most masks): row i's served values past the row's
            own length must be that padding, the rest equal the row.
    """
    assert rows and all(set(row) == set(served) for row in rows), (what, sorted(rows[0]), sorted(served))
    padding = dict(padding)
    for key, want in served.items():
        want = _decoded(want)
        if key not in padding:
            _compare([row[key] for row in rows], want, f"{what}: {key}")
            continue
        kept = []
        for i, row in enumerate(rows):
            n = len(row[key])
            assert np.all(np.asarray(want[i][n:]) == padding[key]), f"{what}: {key} row {i} past {n}: {want[i][n:]}"
            assert n == 0 or np.any(np.asarray(want[i][n - 1]) != padding[key]), f"{what}: {key} row {i} cut short"
            kept.append(want[i][:n])
        _compare(_flat(row[key] for row in rows), np.asarray(_flat(kept), dtype=want.dtype), f"{what}: {key}")


TAGGING_PADDING = {"tags": "", "pieces": "", "tag_ids": -1, "input_mask": 0}
FILL_MASK_PADDING = {"masked_positions": -1, "top_k_ids": -1, "top_k_scores": 0.0, "top_k_pieces": ""}


@pytest.mark.parametrize("name", ["classifier", "tagging"])
def test_single_texts_answer_as_the_saved_model(heads, name):
    rows = heads["models"][name].answer(edge.TEXTS, batch_size=BATCH)
    served = _served(heads["loaded"][name], "serving_default", text=edge.TEXTS)
    assert_rows_equal(rows, served, name, TAGGING_PADDING if name == "tagging" else ())


@pytest.mark.parametrize("name", ["classifier", "tagging"])
def test_text_pairs_answer_as_the_saved_models_pair_signature(heads, name):
    rows = heads["models"][name].answer(edge.TEXTS, edge.PAIRS, batch_size=BATCH)
    served = _served(heads["loaded"][name], "serve_text_pair", text=edge.TEXTS, text_pair=edge.PAIRS)
    assert_rows_equal(rows, served, name + " pairs", TAGGING_PADDING if name == "tagging" else ())
    single = heads["models"][name].answer(edge.TEXTS, batch_size=BATCH)
    assert rows != single  # the pairs are read


def test_labels_and_tags_are_the_models_names(heads):
    labels = {row["label"] for row in heads["models"]["classifier"].answer(edge.TEXTS)}
    assert labels <= set(LABELS) and len(labels) > 1, labels
    tags = {t for row in heads["models"]["tagging"].answer(edge.TEXTS) for t in row["tags"]}
    assert tags - {""} <= set(TAGS) and len(tags - {""}) > 1, tags


def test_span_qa_v1_answers_with_character_offsets_as_the_saved_model(heads):
    rows = heads["models"]["span_qa_v1"].answer(edge.QUESTIONS, edge.CONTEXTS, batch_size=BATCH)
    served = _served(heads["loaded"]["span_qa_v1"], "serving_default", text=edge.QUESTIONS, text_pair=edge.CONTEXTS)
    assert_rows_equal(rows, served, "span_qa_v1")
    answered = [(row, context) for row, context in zip(rows, edge.CONTEXTS) if row["start_char"] >= 0]
    assert len(answered) >= len(edge.CONTEXTS) - 1  # only the empty context has no answer
    for row, context in answered:  # the answer is the context's own text at its offsets
        assert row["answer"] == context[row["start_char"]:row["end_char"]] != ""


def test_span_qa_v2_no_answer_threshold_as_the_saved_model(heads):
    model = heads["models"]["span_qa_v2"]
    rows = model.answer(edge.QUESTIONS, edge.CONTEXTS, batch_size=BATCH,
                        null_score_diff_threshold=heads["threshold"])
    served = _served(heads["loaded"]["span_qa_v2"], "serving_default", text=edge.QUESTIONS, text_pair=edge.CONTEXTS)
    assert_rows_equal(rows, served, "span_qa_v2")
    above = [row["null_odds"] > heads["threshold"] for row in rows]
    assert any(above) and not all(above), above
    for row, is_above in zip(rows, above):
        if is_above:
            assert (row["answer"], row["start_char"], row["end_char"]) == ("", -1, -1), row


def test_multiple_choice_answers_as_the_saved_model(heads):
    texts = edge.QUESTIONS
    rows = heads["models"]["multiple_choice"].answer(texts, choices=edge.CHOICES, batch_size=BATCH)
    served = _served(heads["loaded"]["multiple_choice"], "serving_default", text=texts, choices=edge.CHOICES)
    assert_rows_equal(rows, served, "multiple_choice")


def test_fill_mask_answers_as_the_saved_model(heads):
    rows = heads["models"]["pretrainer"].answer(edge.FILL_MASK, heads["spm"], top_k=5, batch_size=BATCH)
    served = _served(heads["loaded"]["pretrainer"], "serving_default", text=edge.FILL_MASK)
    assert_rows_equal(rows, served, "fill-mask", FILL_MASK_PADDING)


def test_one_string_gives_one_row_and_no_texts_no_rows(heads):
    model = heads["models"]["classifier"]
    assert model.answer(edge.TEXTS[0]) == model.answer([edge.TEXTS[0]])[0]
    assert model.answer([]) == []
    assert heads["models"]["span_qa_v1"].answer([], []) == []


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
        row = model.answer("ka lo mi")
        assert row["label"] == "neutral", row
        np.testing.assert_allclose(row["probabilities"], [0.125, 0.75, 0.125], atol=1e-6)
        np.testing.assert_allclose(row["logits"], [math.log(0.125), math.log(0.75), math.log(0.125)], atol=1e-6)
    # New weights show in the next call (the serving code reads the variables, built once per model).
    _set_head(loaded, [0.6, 0.1, 0.3])
    row = loaded.answer("ka lo mi")
    assert row["label"] == "negative" and np.allclose(row["probabilities"], [0.6, 0.1, 0.3], atol=1e-6), row


@pytest.mark.parametrize("call, message", [
    (lambda m: m["span_qa_v1"].answer(["what?"]), "needs text_pairs"),
    (lambda m: m["multiple_choice"].answer(["ctx"]), "needs choices"),
    (lambda m: m["classifier"].answer(["a", "b"], ["x"]), "got 2 texts but 1 text_pair values"),
    (lambda m: m["classifier"].answer(["a"], top_k=3), "does not take top_k=3"),
    (lambda m: m["classifier"].answer(["a"], choices=[["x", "y"]]), "choices only for multiple choice"),
    (lambda m: m["pretrainer"].answer(["a [MASK]"]), "pass spm_model_file"),
    (lambda m: m["classifier"].answer(["a"], batch_size=0), "batch_size must be >= 1, got 0"),
    (lambda m: m["classifier"].answer(7), "texts must be a string or a list of strings, got int: 7"),
])
def test_refusals_are_one_line_and_quote_the_value(heads, call, message):
    with pytest.raises(ValueError) as info:
        call(heads["models"])
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)
