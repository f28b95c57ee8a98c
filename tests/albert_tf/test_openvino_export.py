"""albert-export --format=openvino: the OpenVINO IR answers as our SavedModel on the
export tests' edge texts (tiny models). Skips without the [openvino] extra
(CI installs .[test,beam])."""

import os

import numpy as np
import pytest

ov = pytest.importorskip("openvino", reason="--format=openvino needs the [openvino] extra")
pytest.importorskip("openvino_tokenizers", reason="--format=openvino needs the [openvino] extra")
pytest.importorskip("transformers", reason="--format=openvino needs the [openvino] extra")

from tests.albert_tf.test_export import LONG, MAX_LEN, TEXTS, _train_spm  # noqa: E402

# The export tests' edge texts plus the normalisation cases (Python whitespace,
# combining marks of non-zero class only, `` '' kept by "original", ligatures, case).
EDGE_TEXTS = TEXTS + ["``quoted'' text", "x\x0by\u2003z\u00a0w\x1c", "\u0915\u093f\u0902 \u0e01\u0e31 e\u0301",
                      "\ufb01 \u216b \u00bd", "UPPER \u00df \u039f\u0394\u039f\u03a3", "[MASK] and [CLS]"]
BF16_RELATIVE = 3e-2  # as bench/systems/onnx_runtimes.py: bfloat16 over the layers, relative to the output's scale


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import keras

    import albert_tf

    root = str(tmp_path_factory.mktemp("openvino"))
    spm = _train_spm(root)
    keras.utils.set_random_seed(7)
    config = albert_tf.AlbertConfig(vocab_size=120, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    pre = albert_tf.AlbertTextPreprocessor(spm, max_seq_length=MAX_LEN)
    return {"root": root, "spm": spm, "config": config, "pre": pre,
            "encoder": albert_tf.AlbertPretrainer(config).encoder,
            "classifier": albert_tf.AlbertClassifier(config, 3, preprocessor=pre, dtype="mixed_bfloat16")}


def _compiled(path, precision="f32"):
    import openvino_tokenizers  # noqa: F401  (the tokenizer's ops)

    return ov.Core().compile_model(os.path.join(path, "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": precision})


@pytest.fixture(scope="module")
def text_export(setup):
    """(OpenVINO version folder, texts -> our SavedModel's serving_default outputs)."""
    import tensorflow as tf

    from albert_tf.export import export_saved_model
    from albert_tf.export.openvino import export_openvino

    path = export_openvino(setup["encoder"], os.path.join(setup["root"], "ov_text"), spm_model_file=setup["spm"],
                           max_seq_length=MAX_LEN)
    saved = export_saved_model(setup["encoder"], os.path.join(setup["root"], "savedmodel"),
                               spm_model_file=setup["spm"], max_seq_length=MAX_LEN)
    fn = tf.saved_model.load(saved).signatures["serving_default"]
    return path, lambda texts: {k: v.numpy() for k, v in fn(text=tf.constant(texts)).items()}


def test_layout_is_ovms_model_repository(text_export, setup):
    path, _ = text_export
    assert path == os.path.join(setup["root"], "ov_text", "1")
    assert sorted(os.listdir(path)) == ["model.bin", "model.xml"]


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_text_model_equals_saved_model_on_edge_texts(text_export, precision):
    path, saved_model = text_export
    want = saved_model(EDGE_TEXTS)
    got = _compiled(path, precision)({"text": np.array(EDGE_TEXTS)})
    got = {name: got[name] for name in ("input_mask", "pooled_output", "sequence_output")}
    np.testing.assert_array_equal(got["input_mask"], want["input_mask"])  # the same pieces, [CLS]/[SEP], truncation
    assert want["input_mask"][EDGE_TEXTS.index(LONG)].sum() == MAX_LEN
    tolerance = 1e-5 if precision == "f32" else BF16_RELATIVE
    valid = want["input_mask"].astype(bool)
    for name, keep in (("pooled_output", slice(None)), ("sequence_output", valid)):
        scale = np.max(np.abs(want[name][keep]))
        assert np.max(np.abs(got[name][keep] - want[name][keep])) <= tolerance * max(scale, 1.0), name


def test_literal_unk_is_the_documented_difference(text_export):
    """TEXT_DIFFERENCES: "<unk>" written in a text is one piece for OpenVINO, its characters for SentencePiece."""
    from albert_tf.export.openvino import TEXT_DIFFERENCES

    path, saved_model = text_export
    got = _compiled(path)({"text": np.array(["a <unk> b"])})["input_mask"].sum()
    want = saved_model(["a <unk> b"])["input_mask"].sum()
    assert any("<unk>" in line for line in TEXT_DIFFERENCES) and got < want


def test_ids_model_of_a_mixed_precision_classifier(setup):
    import tensorflow as tf

    from albert_tf.export.openvino import export_openvino

    clf = setup["classifier"]
    path = export_openvino(clf, os.path.join(setup["root"], "ov_ids"), text_signatures=False)
    compiled = _compiled(path)
    assert sorted(i.get_any_name() for i in compiled.inputs) == ["input_ids", "input_mask", "segment_ids"]
    assert all(i.get_element_type() == ov.Type.i32 for i in compiled.inputs)
    names = {n for out in compiled.outputs for n in out.get_names()}
    assert {"probabilities", "logits"} <= names and "label" not in names  # no string output
    ids = {k: v.numpy() for k, v in setup["pre"](tf.constant(TEXTS)).items()}
    got = compiled(ids)
    want = tf.cast(clf(tf.constant(TEXTS)), tf.float32).numpy()
    # The served graph is the float32 copy: bfloat16 rounding of the Keras model's compute is the difference.
    assert np.max(np.abs(got["logits"] - want)) <= BF16_RELATIVE * max(1.0, np.max(np.abs(want)))
    np.testing.assert_allclose(got["probabilities"].sum(-1), 1.0, atol=1e-5)


def test_unsupported_head_is_refused(setup):
    import albert_tf
    from albert_tf.export.openvino import export_openvino

    with pytest.raises(ValueError, match="--format=openvino exports the heads"):
        export_openvino(albert_tf.AlbertPretrainer(setup["config"]), os.path.join(setup["root"], "no"),
                        spm_model_file=setup["spm"])


def test_text_model_of_a_classifier_equals_saved_model(setup):
    """Packed tokens (the default) leave no While loop behind the tokenizer: the classifier has a text model."""
    import tensorflow as tf

    from albert_tf.export import export_saved_model
    from albert_tf.export.openvino import export_openvino

    clf = setup["classifier"]
    path = export_openvino(clf, os.path.join(setup["root"], "ov_clf_text"), spm_model_file=setup["spm"],
                           max_seq_length=MAX_LEN)
    assert clf.inference_rows_per_bucket and not clf.encoder.inference_packs_tokens  # the model is left as it was
    saved = export_saved_model(clf, os.path.join(setup["root"], "clf_savedmodel"), spm_model_file=setup["spm"],
                               max_seq_length=MAX_LEN)
    want = tf.saved_model.load(saved).signatures["serving_default"](text=tf.constant(EDGE_TEXTS))
    got = _compiled(path)({"text": np.array(EDGE_TEXTS)})
    for name in ("logits", "probabilities"):
        expected = want[name].numpy()
        assert np.max(np.abs(got[name] - expected)) <= BF16_RELATIVE * max(1.0, np.max(np.abs(expected))), name


def test_text_model_of_a_classifier_needs_packed_tokens(setup):
    """OpenVINO 2026.4's CPU plugin fails on the classifier's While loop (its buckets) behind the tokenizer."""
    from albert_tf.export.openvino import export_openvino

    with pytest.raises(ValueError, match="pack_tokens=True"):
        export_openvino(setup["classifier"], os.path.join(setup["root"], "ov_clf_loop"), spm_model_file=setup["spm"],
                        pack_tokens=False)


def test_packed_and_padded_ids_models_agree_at_real_positions(setup):
    from albert_tf.export.openvino import export_openvino

    ids = {k: v.numpy() for k, v in setup["pre"](np.array(TEXTS)).items()}
    real = ids["input_mask"].astype(bool)
    assert not real.all()  # mixed lengths
    out = {}
    for pack in (True, False):
        path = export_openvino(setup["encoder"], os.path.join(setup["root"], f"ov_ids_pack_{pack}"),
                               text_signatures=False, spm_model_file=setup["spm"], pack_tokens=pack)
        out[pack] = _compiled(path)(ids)
    for name in ("pooled_output", "sequence_output"):
        keep = real if name == "sequence_output" else slice(None)
        np.testing.assert_allclose(out[True][name][keep], out[False][name][keep], atol=1e-5, err_msg=name)
    assert not np.any(out[True]["sequence_output"][~real]) and np.all(out[False]["sequence_output"][~real] != 0)
