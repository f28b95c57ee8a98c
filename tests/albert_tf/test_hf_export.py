"""Writing Hugging Face folders (`save_huggingface`, albert-convert --to=huggingface).

The layout is checked against files transformers itself wrote (tests/fixtures/hf_albert, see
make_hf_fixtures.py): reading one and writing it back must give the same tensors bit for bit. The round
trip through our Hugging Face loader must give identical weights and outputs for every sharing layout
Hugging Face can express; the others are refused with one line naming the setting. When transformers is
installed (the [bench] extra), transformers' own AlbertForPreTraining must compute our outputs.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from safetensors.numpy import load_file

import albert_tf
from albert_tf import checkpoints
from albert_tf.checkpoints import original_variable_map
from albert_tf.config import AlbertConfig

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures")
HF = os.path.join(FIXTURES, "hf_albert")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))

# Layouts Hugging Face expresses: (sharing, L, G, K, E, H, activation).
EXPRESSIBLE = [
    ("all", 2, 1, 1, 8, 16, "gelu"),  # the original's layout, E != H
    ("all", 4, 2, 2, 16, 16, "gelu_exact"),  # E = H: no projection here, the identity there
    ("none", 3, 1, 2, "8", 16, "relu"),  # every layer its own group (HF: num_hidden_groups = L)
    ("attention", 2, 2, 1, 8, 16, "gelu_new"),  # G = L: nothing shared
]


def _config(sharing, layers, groups, inner, emb, hidden, act):
    return AlbertConfig.tiny(sharing=sharing, num_hidden_layers=layers, num_hidden_groups=groups,
                             inner_group_num=inner, embedding_size=int(emb), hidden_size=hidden, hidden_act=act,
                             initializer_range=0.2)  # not ~0: outputs that differ by layout differ visibly


def _batch(config):
    rng = np.random.default_rng(3)
    ids = rng.integers(5, config.vocab_size, (2, 10)).astype(np.int32)
    mask = np.ones((2, 10), np.int32)
    mask[1, 6:] = 0
    segments = np.zeros((2, 10), np.int32)
    segments[:, 4:] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments,
            "masked_lm_positions": np.array([[1, 5], [2, 3]], np.int32)}


@pytest.mark.parametrize("layout", EXPRESSIBLE, ids=lambda x: "_".join(map(str, x)))
def test_round_trip_through_our_hugging_face_loader_is_exact(tmp_path, layout):
    config = _config(*layout)
    model = albert_tf.AlbertPretrainer(config)
    folder = checkpoints.save_huggingface(model, str(tmp_path / "hf"))
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert hf_config["num_hidden_groups"] == config.num_attention_groups == config.num_ffn_groups
    again = albert_tf.load_checkpoint(folder)
    assert (again.config.num_attention_groups, again.config.num_ffn_groups) == (
        config.num_attention_groups, config.num_ffn_groups)
    assert again.config.hidden_act in {config.hidden_act, "gelu" if config.hidden_act == "gelu_new" else None}
    before, after = original_variable_map(model), original_variable_map(again)
    assert sorted(before) == sorted(after)
    for name, var in before.items():
        np.testing.assert_array_equal(after[name].numpy(), var.numpy(), err_msg=name)
    batch = _batch(config)
    want, got = model(batch), again(batch)
    for key in ("sequence_output", "pooled_output", "mlm_logits", "sop_logits"):
        np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)


@pytest.mark.parametrize("variant", ["gelu_new_g1_i1", "gelu_g2_i2"])
def test_rewriting_a_transformers_folder_gives_its_tensors_and_config(tmp_path, variant):
    source = os.path.join(HF, variant)
    checkpoints.save_huggingface(albert_tf.load_checkpoint(source), str(tmp_path))
    theirs, ours = load_file(os.path.join(source, "model.safetensors")), load_file(str(tmp_path / "model.safetensors"))
    assert sorted(ours) == sorted(theirs)
    for key in theirs:
        assert ours[key].dtype == theirs[key].dtype and ours[key].shape == theirs[key].shape, key
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    with open(os.path.join(source, "config.json")) as f:
        their_config = json.load(f)
    our_config = json.loads((tmp_path / "config.json").read_text())
    # Not compared: what transformers adds about itself, and the fine-tuning head's dropout (ours: 0.1).
    for key in sorted(set(their_config) - {"transformers_version", "dtype", "classifier_dropout_prob"}):
        assert our_config.get(key) == their_config[key], key


def test_heads_the_source_lacks_are_not_written(tmp_path):
    model = albert_tf.AlbertPretrainer(AlbertConfig.tiny())
    arrays = {name: var.numpy() for name, var in original_variable_map(model).items() if not name.startswith("cls/")}
    source = tmp_path / "encoder_only"
    albert_tf.save_pretrained(model, str(source))
    from safetensors.numpy import save_file

    save_file(arrays, str(source / "model.weights.safetensors"))
    loaded, missing = checkpoints.load_checkpoint_with_report(str(source))
    assert len(missing) == 7 and all(name.startswith("cls/") for name in missing)
    checkpoints.save_huggingface(loaded, str(tmp_path / "hf"), missing_heads=missing)
    keys = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert all(k.startswith("albert.") for k in keys) and len(keys) == len(arrays)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["AlbertModel"]
    # Only the SOP head missing: the MLM head is written, transformers' AlbertForMaskedLM.
    checkpoints.save_huggingface(loaded, str(tmp_path / "mlm"), missing_heads=["cls/seq_relationship/output_bias"])
    keys = load_file(str(tmp_path / "mlm" / "model.safetensors"))
    assert "predictions.bias" in keys and not any(k.startswith("sop_classifier") for k in keys)
    assert json.loads((tmp_path / "mlm" / "config.json").read_text())["architectures"] == ["AlbertForMaskedLM"]


@pytest.mark.parametrize("overrides, message", [
    (dict(sharing="attention", num_hidden_layers=2, num_hidden_groups=1),
     r"^sharing='attention' with num_hidden_groups=1 < num_hidden_layers=2 cannot be written for Hugging Face"),
    (dict(sharing="ffn", num_hidden_layers=3, num_hidden_groups=1), r"^sharing='ffn' with num_hidden_groups=1"),
])
def test_layouts_hugging_face_cannot_express_are_refused_in_one_line(tmp_path, overrides, message):
    config = AlbertConfig.tiny(**overrides)
    with pytest.raises(ValueError, match=message) as info:
        checkpoints.save_huggingface(albert_tf.AlbertPretrainer(config), str(tmp_path / "hf"))
    assert "\n" not in str(info.value)
    assert not (tmp_path / "hf").exists()  # refused before writing anything


@pytest.mark.parametrize("sharing, layers, groups, layer, ours, theirs", [
    # int(15 / 22 * 22) = 14 in floating point, Hugging Face's int(15 / (22 / 22)) = 15.
    ("none", 22, 1, 15, 14, 15),
    ("all", 18, 14, 9, 7, 6),  # int(9 / 18 * 14) = 7, int(9 / (18 / 14)) = int(6.9999...) = 6
])
def test_layer_to_group_mappings_that_differ_are_refused(sharing, layers, groups, layer, ours, theirs):
    config = AlbertConfig.tiny(sharing=sharing, num_hidden_layers=layers, num_hidden_groups=groups)
    with pytest.raises(ValueError, match=rf"^num_hidden_layers={layers} with .* layer {layer} uses group {ours} "
                                         rf"here \(int\(l / L \* G\)\) but {theirs} there"):
        checkpoints.hf_num_hidden_groups(config)
    # The usual depths map alike for every G.
    for num_layers in (12, 24):
        for g in range(1, num_layers + 1):
            assert checkpoints.hf_num_hidden_groups(AlbertConfig.tiny(num_hidden_layers=num_layers,
                                                                      num_hidden_groups=g)) == g


def test_convert_binary_to_huggingface(tmp_path):
    model = albert_tf.AlbertPretrainer(AlbertConfig.tiny())
    spm = tmp_path / "tiny.model"
    spm.write_bytes(b"sentencepiece bytes")
    source = albert_tf.save_pretrained(model, str(tmp_path / "ours"), spm_model_file=str(spm))
    refused = albert_tf.save_pretrained(albert_tf.AlbertPretrainer(AlbertConfig.tiny(
        sharing="ffn", num_hidden_layers=2)), str(tmp_path / "ffn"))
    env = dict(os.environ, PYTHONPATH=REPO)
    runs = [subprocess.Popen([sys.executable, "-m", "albert_tf.bin.convert", f"--input={src}",
                              f"--output_dir={tmp_path / out}", "--to=huggingface"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
             for src, out in ((source, "hf"), (refused, "ffn_hf"))]
    (_, ok_err), (_, bad_err) = [run.communicate(timeout=300) for run in runs]
    assert runs[0].returncode == 0, ok_err[-2000:]
    assert (tmp_path / "hf" / "spiece.model").read_bytes() == b"sentencepiece bytes"
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["AlbertForPreTraining"]
    again = albert_tf.load_checkpoint(str(tmp_path / "hf"))
    for name, var in original_variable_map(model).items():
        np.testing.assert_array_equal(original_variable_map(again)[name].numpy(), var.numpy(), err_msg=name)
    assert runs[1].returncode == 1
    assert bad_err.strip().splitlines()[-1].startswith("albert-convert: sharing='ffn' with num_hidden_groups=1")
    assert "Traceback" not in bad_err


@pytest.mark.parametrize("layout", [EXPRESSIBLE[1], EXPRESSIBLE[2]],
                         ids=lambda x: "_".join(map(str, x)))
def test_transformers_computes_our_outputs(tmp_path, layout):
    pytest.importorskip("torch", reason="torch is in the [bench] extra, not the test extra")
    pytest.importorskip("transformers", reason="transformers is in the [bench] extra, not the test extra")
    from bench.hf_equivalence import compare_with_transformers

    keras.utils.set_random_seed(7)
    folder = checkpoints.save_huggingface(albert_tf.AlbertPretrainer(_config(*layout)), str(tmp_path))
    # float32 on both sides, different kernels: a few ulps of the values each output sums (the bound is relative
    # to the output's scale; MLM logits reach ~10 here, and 1.6e-5 was seen on them).
    diffs = compare_with_transformers(folder, atol=1e-5)
    assert set(diffs) == {"sequence_output", "pooled_output", "mlm_logits", "sop_logits"}


def test_transformers_comparison_fails_on_a_wrong_weight(tmp_path, monkeypatch):
    pytest.importorskip("torch", reason="torch is in the [bench] extra, not the test extra")
    pytest.importorskip("transformers", reason="transformers is in the [bench] extra, not the test extra")
    from bench.hf_equivalence import compare_with_transformers

    keras.utils.set_random_seed(7)
    folder = checkpoints.save_huggingface(albert_tf.AlbertPretrainer(_config(*EXPRESSIBLE[0])), str(tmp_path))
    load = checkpoints.load_checkpoint_with_report

    def load_with_one_scale_off_by_a_percent(path):
        model, missing = load(path)
        scale = next(v for v in model.weights if v.path.endswith("ffn_group_0_inner_0/layer_norm/gamma"))
        scale.assign(scale * 1.01)
        return model, missing

    monkeypatch.setattr(checkpoints, "load_checkpoint_with_report", load_with_one_scale_off_by_a_percent)
    with pytest.raises(AssertionError, match="differ by more than 1e-05"):
        compare_with_transformers(folder, atol=1e-5)
