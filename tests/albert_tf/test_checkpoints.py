import json
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

import albert_tf
from albert_tf.checkpoints import original_variable_map
from albert_tf.config import AlbertConfig

from . import numpy_reference

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")
ORIGINAL = os.path.join(FIXTURES, "original_albert")
HF = os.path.join(FIXTURES, "hf_albert")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _golden_inputs(io):
    return {
        "input_ids": io["input_ids"],
        "input_mask": io["input_mask"],
        "segment_ids": io["segment_ids"],
        "masked_lm_positions": io["mlm_positions"],
    }


def _assert_golden(model, io, atol=1e-5):
    inputs = _golden_inputs(io)
    out = model(inputs)
    np.testing.assert_allclose(out["sequence_output"].numpy(), io["sequence_output"], atol=atol)
    np.testing.assert_allclose(out["pooled_output"].numpy(), io["pooled_output"], atol=atol)
    np.testing.assert_allclose(out["mlm_logits"].numpy().reshape(io["mlm_logits"].shape), io["mlm_logits"], atol=atol)
    np.testing.assert_allclose(out["sop_logits"].numpy(), io["sop_logits"], atol=atol)


@pytest.mark.parametrize("folder", ["g1_i1", "g2_i2"])
def test_original_checkpoint_reproduces_golden_outputs(folder):
    path = os.path.join(ORIGINAL, folder)
    io = np.load(os.path.join(path, "io.npz"))
    model = albert_tf.load_checkpoint(os.path.join(path, "model.ckpt"))
    _assert_golden(model, io)
    enc = model.encoder(_golden_inputs(io), return_all_layers=True)
    np.testing.assert_allclose(np.stack([x.numpy() for x in enc["all_layers"]]), io["all_layers"], atol=1e-5)
    for packs_tokens in (False, True):  # the last block at [CLS] only (heads on the pooled output)
        model.encoder.inference_packs_tokens = packs_tokens
        pooled = model.encoder(_golden_inputs(io), pooled_output_only=True)["pooled_output"]
        np.testing.assert_allclose(pooled.numpy(), io["pooled_output"], atol=1e-5)
    model.encoder.inference_packs_tokens = False
    embedded = model.encoder.embeddings(io["input_ids"], io["segment_ids"])
    np.testing.assert_allclose(embedded.numpy(), io["embedding_output"], atol=1e-5)
    # A folder (with its `checkpoint` index file) works as well as the prefix.
    _assert_golden(albert_tf.load_checkpoint(path), io)


@pytest.mark.parametrize("folder", ["g1_i1", "g2_i2"])
def test_numpy_reference_reproduces_golden(folder):
    # Validates the NumPy reference used for the sharing modes in test_encoder.
    path = os.path.join(ORIGINAL, folder)
    io = np.load(os.path.join(path, "io.npz"))
    cfg = AlbertConfig.from_json_file(os.path.join(path, "albert_config.json"))
    reader = tf.train.load_checkpoint(os.path.join(path, "model.ckpt"))
    weights = {n: reader.get_tensor(n).astype(np.float64) for n in reader.get_variable_to_shape_map()}
    ref = numpy_reference.forward(
        weights,
        dict(hidden_size=16, num_hidden_layers=4, num_attention_heads=2, inner_group_num=cfg.inner_group_num,
             attention_groups=cfg.num_hidden_groups, ffn_groups=cfg.num_hidden_groups),
        io["input_ids"], io["input_mask"], io["segment_ids"], io["mlm_positions"],
    )
    np.testing.assert_allclose(ref["sequence_output"], io["sequence_output"], atol=1e-5)
    np.testing.assert_allclose(ref["mlm_logits"].reshape(-1, 50), io["mlm_logits"], atol=1e-5)


@pytest.mark.parametrize("folder, act, groups", [("gelu_new_g1_i1", "gelu", 1), ("gelu_g2_i2", "gelu_exact", 2)])
def test_hugging_face_folder_reproduces_its_outputs(folder, act, groups):
    path = os.path.join(HF, folder)
    io = np.load(os.path.join(path, "io.npz"))
    model = albert_tf.load_checkpoint(path)
    assert model.config.hidden_act == act and model.config.num_hidden_groups == groups
    out = model({
        "input_ids": io["input_ids"], "input_mask": io["attention_mask"], "segment_ids": io["token_type_ids"],
        "masked_lm_positions": io["mlm_positions"],
    })
    np.testing.assert_allclose(out["sequence_output"].numpy(), io["sequence_output"], atol=1e-5)
    np.testing.assert_allclose(out["pooled_output"].numpy(), io["pooled_output"], atol=1e-5)
    np.testing.assert_allclose(out["mlm_logits"].numpy(), io["prediction_logits"], atol=1e-5)
    np.testing.assert_allclose(out["sop_logits"].numpy(), io["sop_logits"], atol=1e-5)


def test_hf_encoder_only_folder_reports_missing_heads(tmp_path, caplog):
    src = os.path.join(HF, "gelu_new_g1_i1")
    tensors = {k: v for k, v in load_file(os.path.join(src, "model.safetensors")).items() if k.startswith("albert.")}
    tensors["albert.embeddings.position_ids"] = np.arange(32, dtype=np.int64)[None]  # older files carry it
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with open(os.path.join(src, "config.json")) as f:
        (tmp_path / "config.json").write_text(f.read())
    with caplog.at_level(logging.WARNING):
        model = albert_tf.load_checkpoint(str(tmp_path))
    assert "head variable" in caplog.text and "cls/seq_relationship/output_weights" in caplog.text
    io = np.load(os.path.join(src, "io.npz"))
    out = model.encoder({"input_ids": io["input_ids"], "input_mask": io["attention_mask"],
                         "segment_ids": io["token_type_ids"]})
    np.testing.assert_allclose(out["sequence_output"].numpy(), io["sequence_output"], atol=1e-5)


def test_shape_mismatch_names_variable_and_shapes():
    prefix = os.path.join(ORIGINAL, "g1_i1", "model.ckpt")
    with pytest.raises(ValueError, match="^" + re.escape(
            f"{prefix} does not match its config: bert/embeddings/word_embeddings has shape (50, 8) there and "
            "(60, 8) in the model (and 1 more); the checkpoint is a model of another size, or the config beside "
            "it is not its own.") + "$"):
        albert_tf.load_checkpoint(
            os.path.join(ORIGINAL, "g1_i1", "model.ckpt"),
            config=AlbertConfig.from_json_file(os.path.join(ORIGINAL, "g1_i1", "albert_config.json")).__class__(
                **{**AlbertConfig.from_json_file(os.path.join(ORIGINAL, "g1_i1", "albert_config.json")).to_dict(),
                   "vocab_size": 60}
            ),
        )


def test_missing_and_unused_variables_are_reported(caplog):
    g1 = AlbertConfig.from_json_file(os.path.join(ORIGINAL, "g1_i1", "albert_config.json"))
    # Config wants two groups, the checkpoint has one: an error, not random weights.
    with pytest.raises(ValueError, match="group_1"):
        albert_tf.load_checkpoint(os.path.join(ORIGINAL, "g1_i1", "model.ckpt"),
                                  config=AlbertConfig(**{**g1.to_dict(), "num_hidden_groups": 2}))
    # Config wants one group, the checkpoint has two: refused (issue 36 F9), not half of it loaded.
    prefix = os.path.join(ORIGINAL, "g2_i2", "model.ckpt")
    with pytest.raises(ValueError, match="^" + re.escape(
            f"{prefix} holds 48 encoder variable(s) the config has no place for, e.g. "
            "bert/encoder/transformer/group_0/inner_group_1/LayerNorm/beta. Check that the config matches the "
            "checkpoint (num_hidden_layers, num_hidden_groups, inner_group_num, sharing).") + "$"):
        albert_tf.load_checkpoint(prefix, config=g1)


def test_missing_path_and_unknown_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        albert_tf.load_checkpoint(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match=re.escape(
            f"{str(tmp_path)!r} holds no weights this library reads: looked for model.weights.safetensors, "
            "model.safetensors, a 'checkpoint' file or a single TF checkpoint")):
        albert_tf.load_checkpoint(str(tmp_path))


def test_save_pretrained_round_trip(tmp_path):
    model = albert_tf.load_checkpoint(os.path.join(ORIGINAL, "g2_i2", "model.ckpt"))
    spm = tmp_path / "x.model"
    spm.write_bytes(b"spm")
    out = albert_tf.save_pretrained(model, str(tmp_path / "ours"), spm_model_file=str(spm))
    assert sorted(os.listdir(out)) == ["albert_config.json", "model.weights.safetensors", "spm.model"]
    _assert_golden(albert_tf.load_checkpoint(out), np.load(os.path.join(ORIGINAL, "g2_i2", "io.npz")))


def test_training_checkpoint_loads(tmp_path):
    model = albert_tf.load_checkpoint(os.path.join(ORIGINAL, "g1_i1", "model.ckpt"))
    model.config.to_json_file(str(tmp_path / "albert_config.json"))
    step = tf.Variable(7, dtype=tf.int64)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, step=step), str(tmp_path), max_to_keep=1)
    manager.save()
    _assert_golden(albert_tf.load_checkpoint(str(tmp_path)), np.load(os.path.join(ORIGINAL, "g1_i1", "io.npz")))


def test_convert_binary(tmp_path):
    out = tmp_path / "converted"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    result = subprocess.run(
        [sys.executable, "-m", "albert_tf.bin.convert", f"--input={os.path.join(ORIGINAL, 'g2_i2', 'model.ckpt')}",
         f"--output_dir={out}"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads((out / "albert_config.json").read_text())["num_hidden_groups"] == 2
    _assert_golden(albert_tf.load_checkpoint(str(out)), np.load(os.path.join(ORIGINAL, "g2_i2", "io.npz")))


def test_our_format_reports_mismatches_by_name(tmp_path):
    model = albert_tf.AlbertPretrainer(AlbertConfig.tiny())
    out = albert_tf.save_pretrained(model, str(tmp_path / "ours"))
    with pytest.raises(ValueError, match=r"word_embeddings has shape \(100, 16\) there and \(120, 16\) in the model"):
        albert_tf.load_checkpoint(out, config=AlbertConfig.tiny(vocab_size=120))
    with pytest.raises(ValueError, match="group_1"):
        albert_tf.load_checkpoint(out, config=AlbertConfig.tiny(num_hidden_groups=2))


def test_hugging_face_layer_norm_eps_is_honoured(tmp_path):
    src = os.path.join(HF, "gelu_new_g1_i1")
    with open(os.path.join(src, "config.json")) as f:
        hf_config = json.load(f)
    hf_config["layer_norm_eps"] = 1e-5
    (tmp_path / "config.json").write_text(json.dumps(hf_config))
    os.symlink(os.path.join(src, "model.safetensors"), tmp_path / "model.safetensors")
    model = albert_tf.load_checkpoint(str(tmp_path))
    assert model.config.layer_norm_eps == 1e-5
    encoder = model.encoder
    norms = [encoder.embeddings.layer_norm, model.mlm_head.layer_norm]
    for group in encoder.transformer.attention_groups + encoder.transformer.ffn_groups:
        norms.extend(layer.layer_norm for layer in group)
    assert [norm.epsilon for norm in norms] == [1e-5] * len(norms)

    # The embedding output against a NumPy LayerNorm with that epsilon.
    emb = encoder.embeddings
    ids = np.array([[2, 7, 9, 3]], np.int32)
    segments = np.array([[0, 0, 1, 1]], np.int32)
    x = (emb.word_embeddings.numpy()[ids] + emb.token_type_embeddings.numpy()[segments]
         + emb.position_embeddings.numpy()[:4][None]).astype(np.float64)
    gamma, beta = emb.layer_norm.gamma.numpy(), emb.layer_norm.beta.numpy()
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    with_eps = lambda eps: (x - mean) / np.sqrt(var + eps) * gamma + beta  # noqa: E731
    got = emb(ids, segments).numpy()
    np.testing.assert_allclose(got, with_eps(1e-5), atol=1e-6)
    # The fixture's activations are small enough for the two epsilons to differ visibly.
    assert np.abs(with_eps(1e-5) - with_eps(1e-12)).max() > 1e-4

    # Saved in our format, the epsilon stays.
    out = albert_tf.save_pretrained(model, str(tmp_path / "ours"))
    assert json.loads((tmp_path / "ours" / "albert_config.json").read_text())["layer_norm_eps"] == 1e-5
    assert albert_tf.load_checkpoint(out).encoder.embeddings.layer_norm.epsilon == 1e-5


def test_hugging_face_config_without_a_required_field_is_an_error(tmp_path):
    src = os.path.join(HF, "gelu_new_g1_i1")
    with open(os.path.join(src, "config.json")) as f:
        hf_config = json.load(f)
    del hf_config["num_hidden_layers"]
    (tmp_path / "config.json").write_text(json.dumps(hf_config))
    os.symlink(os.path.join(src, "model.safetensors"), tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"config\.json: .*required.*'num_hidden_layers'"):
        albert_tf.load_checkpoint(str(tmp_path))


def test_the_identity_projection_of_a_model_without_one_is_accepted_and_a_real_one_refused():
    """E = H: Hugging Face stores an embedding projection anyway, the identity with a zero bias (hf_state_dict).
    Loading drops exactly that one; any other projection would be lost, so it is refused."""
    from albert_tf.checkpoints import assign_by_name

    config = AlbertConfig(vocab_size=30, embedding_size=16, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    model = albert_tf.AlbertPretrainer(config)
    model({"input_ids": tf.zeros([1, 4], tf.int32), "input_mask": tf.ones([1, 4], tf.int32),
           "segment_ids": tf.zeros([1, 4], tf.int32), "masked_lm_positions": tf.zeros([1, 1], tf.int32)})
    values = {name: v.numpy() for name, v in original_variable_map(model).items()}
    projection = "bert/encoder/embedding_hidden_mapping_in/"
    assert projection + "kernel" not in values  # no projection in a model with E = H
    identity = dict(values, **{projection + "kernel": np.eye(16, dtype=np.float32),
                               projection + "bias": np.zeros(16, np.float32)})
    assign_by_name(model, identity, source="hf")
    scaled = dict(identity, **{projection + "kernel": 2 * np.eye(16, dtype=np.float32)})
    with pytest.raises(ValueError, match="holds 2 encoder variable\\(s\\) the config has no place for, e.g. "
                                         "bert/encoder/embedding_hidden_mapping_in/bias"):
        assign_by_name(model, scaled, source="hf")
