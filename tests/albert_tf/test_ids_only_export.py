"""An ids-only export (text_signatures=False, albert-export --notext_signatures) needs no SentencePiece model.

Its graph holds no tokenizer, so export_saved_model, export_openvino and albert-export make it from a model
that has none; a SentencePiece model given (or found beside the checkpoint) is still written to
assets/spm.model for the clients that tokenize. Outputs are compared with the Keras model on the same ids
(tiny models with randomised weights: outputs of order 1), each with a wrong-answer companion. The OpenVINO
tests skip without the [openvino] extra (CI reruns them where it is installed).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TAGS = ["O", "B-X", "I-X", "B-Y"]
LABELS = ["neg", "neu", "pos"]
# Two rows of ids of different lengths ([CLS] ... [SEP], padding), one [MASK] (id 4) in each.
IDS = {"input_ids": np.array([[2, 17, 4, 33, 3, 0, 0], [2, 50, 61, 72, 4, 90, 3]], np.int32),
       "input_mask": np.array([[1, 1, 1, 1, 1, 0, 0], [1] * 7], np.int32),
       "segment_ids": np.zeros((2, 7), np.int32)}


def _randomise(model, seed):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0.0, 0.3, size=v.shape).astype(np.float32) + (1.0 if "gamma" in v.path else 0.0))
    return model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import keras

    import albert_tf
    from tests.albert_tf.test_export import _train_spm

    root = tmp_path_factory.mktemp("ids_only")
    keras.utils.set_random_seed(11)
    config = albert_tf.AlbertConfig(vocab_size=120, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    pretrainer = _randomise(albert_tf.AlbertPretrainer(config), 1)
    return {
        "root": root, "spm": _train_spm(str(root)), "pretrainer": pretrainer, "encoder": pretrainer.encoder,
        # Task models built without a preprocessor: nothing to tokenize with.
        "classifier": _randomise(albert_tf.AlbertClassifier(config, 3, label_names=LABELS), 2),
        "tagging": _randomise(albert_tf.AlbertTokenClassifier(config, len(TAGS), tag_names=TAGS), 3),
        "span_qa": albert_tf.AlbertSpanQA(config),
    }


def _export(models, head, name, **kwargs):
    from albert_tf.export import export_saved_model

    return export_saved_model(models[head], str(models["root"] / name), text_signatures=False, **kwargs)


def _serve(path, signature="serving_default"):
    import tensorflow as tf

    fn = tf.saved_model.load(path).signatures[signature]
    return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in IDS.items()}).items()}


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _graph_has_sentencepiece(path):
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        return b"Sentencepiece" in f.read()


def _assets(path):
    return set(os.listdir(os.path.join(path, "assets")))


def test_every_ids_head_exports_without_a_sentencepiece_model(models):
    import tensorflow as tf

    paths = {head: _export(models, head, head) for head in ("encoder", "pretrainer", "classifier", "tagging")}
    for head, path in paths.items():
        assert not _graph_has_sentencepiece(path), head
        assert "spm.model" not in _assets(path) and "preprocessing.json" in _assets(path), head
        assert set(tf.saved_model.load(path).signatures) == {"serving_default", "serve_token_ids"}, head

    want = models["encoder"](IDS)
    got = _serve(paths["encoder"])
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"].numpy(), atol=1e-5)
    np.testing.assert_array_equal(got["input_mask"], IDS["input_mask"])
    # Companion: the other row's pooled output is far from this one's (a shuffled answer would fail).
    assert np.abs(got["pooled_output"][::-1] - want["pooled_output"].numpy()).max() > 1e-2

    logits = models["classifier"](IDS).numpy()
    got = _serve(paths["classifier"])
    np.testing.assert_allclose(got["probabilities"], _softmax(logits), atol=1e-5)
    assert [x.decode() for x in got["label"]] == [LABELS[i] for i in logits.argmax(-1)]
    assert np.abs(got["probabilities"] - _softmax(np.zeros_like(logits))).max() > 1e-2  # not uniform

    tag_logits = models["tagging"](IDS).numpy()
    got = _serve(paths["tagging"])
    assert "pieces" not in got  # no SentencePiece model: tokens are not named
    # Issue 35 N9: without the pieces, every real position but [CLS] (2) and [SEP] (3) gets a tag.
    tagged = (IDS["input_mask"] == 1) & ~np.isin(IDS["input_ids"], [2, 3])
    want_tags = np.where(tagged, tag_logits.argmax(-1), -1)
    np.testing.assert_array_equal(got["tag_ids"], want_tags)
    assert len(set(want_tags[tagged].tolist())) > 1  # tags differ: a constant answer fails


def test_fill_mask_serves_ids_and_scores_without_pieces(models):
    path = _export(models, "pretrainer", "fill_mask_ids", top_k=3)
    got = _serve(path)
    assert set(got) == {"masked_positions", "top_k_ids", "top_k_scores"}
    positions = [[2], [4]]  # the [MASK] (id 4) of each row
    np.testing.assert_array_equal(got["masked_positions"], positions)
    logits = models["pretrainer"]({**IDS, "masked_lm_positions": np.array(positions, np.int32)})["mlm_logits"]
    probs = _softmax(logits.numpy().astype(np.float64))
    want_ids = np.argsort(-probs, axis=-1)[:, :, :3]
    np.testing.assert_array_equal(got["top_k_ids"], want_ids)
    np.testing.assert_allclose(got["top_k_scores"], np.take_along_axis(probs, want_ids, -1), atol=1e-5)
    # Companion: the other row's scores are not these (rows swapped fails).
    assert np.abs(got["top_k_scores"] - got["top_k_scores"][::-1]).max() > 1e-4


def test_a_given_sentencepiece_model_is_written_for_clients(models):
    import sentencepiece

    with open(models["spm"], "rb") as f:
        spm_bytes = f.read()
    encoder = _export(models, "encoder", "encoder_with_spm", spm_model_file=models["spm"])
    with open(os.path.join(encoder, "assets", "spm.model"), "rb") as f:
        assert f.read() == spm_bytes
    assert not _graph_has_sentencepiece(encoder)
    # With the model, the fill-mask candidates are named too.
    got = _serve(_export(models, "pretrainer", "fill_mask_with_spm", spm_model_file=models["spm"], top_k=3))
    sp = sentencepiece.SentencePieceProcessor(model_file=models["spm"])
    names = [[[sp.IdToPiece(int(i)) for i in row] for row in mask] for mask in got["top_k_ids"]]
    assert [[[p.decode() for p in row] for row in mask] for mask in got["top_k_pieces"]] == names
    # Companion: a text export of the same encoder holds the tokenizer (what the checks above rule out).
    from albert_tf.export import export_saved_model

    text = export_saved_model(models["encoder"], str(models["root"] / "encoder_text"), spm_model_file=models["spm"])
    assert _graph_has_sentencepiece(text)


def test_text_signatures_and_span_qa_answers_still_need_the_model(models):
    from albert_tf.export import export_saved_model

    for head, text_signatures in (("encoder", True), ("classifier", True), ("span_qa", False)):
        target = str(models["root"] / f"refused_{head}")
        with pytest.raises(ValueError, match=r"has no tokenizer.*pass spm_model_file"):
            export_saved_model(models[head], target, text_signatures=text_signatures)
        assert not os.listdir(target) if os.path.exists(target) else True


def _albert_export(*args):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.Popen([sys.executable, "-m", "albert_tf.bin.export", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_binary_exports_ids_only_from_a_checkpoint_without_sentencepiece(models):
    import albert_tf

    checkpoint = str(models["root"] / "pretrained")
    albert_tf.save_pretrained(models["pretrainer"], checkpoint)  # no spm.model beside it
    with_spm = str(models["root"] / "pretrained_spm")
    albert_tf.save_pretrained(models["pretrainer"], with_spm, spm_model_file=models["spm"])
    runs = {
        "ids": _albert_export(f"--checkpoint={checkpoint}", "--head=encoder", "--notext_signatures",
                              f"--export_dir={models['root'] / 'bin_ids'}"),
        "ids_found_spm": _albert_export(f"--checkpoint={with_spm}", "--head=pretrainer", "--notext_signatures",
                                        f"--export_dir={models['root'] / 'bin_ids_spm'}"),
        "text": _albert_export(f"--checkpoint={checkpoint}", "--head=encoder",
                               f"--export_dir={models['root'] / 'bin_text'}"),
    }
    done = {name: (p.wait(timeout=600), p.communicate()[1]) for name, p in runs.items()}
    rc, stderr = done["ids"]
    assert rc == 0, stderr[-3000:]
    path = str(models["root"] / "bin_ids" / "1")
    assert "spm.model" not in _assets(path)
    np.testing.assert_allclose(_serve(path)["pooled_output"], models["encoder"](IDS)["pooled_output"].numpy(),
                               atol=1e-5)
    rc, stderr = done["ids_found_spm"]  # spm.model beside the checkpoint: written for the clients
    assert rc == 0, stderr[-3000:]
    path = str(models["root"] / "bin_ids_spm" / "1")
    with open(os.path.join(path, "assets", "spm.model"), "rb") as f, open(models["spm"], "rb") as g:
        assert f.read() == g.read()
    assert "top_k_pieces" in _serve(path)
    rc, stderr = done["text"]
    lines = [line for line in stderr.splitlines() if line.startswith("albert-export:")]
    assert rc == 1 and len(lines) == 1, stderr[-3000:]
    assert "--spm_model_file" in lines[0] and "--notext_signatures" in lines[0], lines


# ---------------------------------------------------------------- OpenVINO (the [openvino] extra)

def _openvino():
    ov = pytest.importorskip("openvino", reason="--format=openvino needs the [openvino] extra")
    pytest.importorskip("openvino_tokenizers", reason="--format=openvino needs the [openvino] extra")
    pytest.importorskip("transformers", reason="--format=openvino needs the [openvino] extra")
    return ov


def _ov_outputs(ov, path):
    compiled = ov.Core().compile_model(os.path.join(path, "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    result = compiled(IDS)
    return {out.get_any_name(): result[out] for out in compiled.outputs}


def test_openvino_ids_only_without_a_sentencepiece_model(models):
    ov = _openvino()
    from albert_tf.export.openvino import export_openvino

    path = export_openvino(models["classifier"], str(models["root"] / "ov_ids"), text_signatures=False)
    assert "spm.model" not in _assets(path)
    logits = models["classifier"](IDS).numpy()
    got = _ov_outputs(ov, path)
    np.testing.assert_allclose(got["probabilities"], _softmax(logits), atol=1e-5)
    assert np.abs(got["probabilities"] - _softmax(logits[::-1])).max() > 1e-3  # rows swapped: fails
    with pytest.raises(ValueError, match="pass spm_model_file"):  # the text model needs the tokenizer
        export_openvino(models["encoder"], str(models["root"] / "ov_text"))

    checkpoint = str(models["root"] / "ov_pretrained")
    import albert_tf

    albert_tf.save_pretrained(models["pretrainer"], checkpoint)
    proc = _albert_export(f"--checkpoint={checkpoint}", "--head=encoder", "--format=openvino", "--notext_signatures",
                          f"--export_dir={models['root'] / 'ov_bin'}")
    rc, stderr = proc.wait(timeout=600), proc.communicate()[1]
    assert rc == 0, stderr[-3000:]
    path = str(models["root"] / "ov_bin" / "1")
    assert "spm.model" not in _assets(path)
    np.testing.assert_allclose(_ov_outputs(ov, path)["pooled_output"],
                               models["encoder"](IDS)["pooled_output"].numpy(), atol=1e-5)
