import dataclasses
import json
import os

import pytest

from albert_tf.config import AlbertConfig


def test_presets_have_released_values():
    base = AlbertConfig.from_preset("albert_base_v2")
    assert (base.hidden_size, base.num_hidden_layers, base.num_attention_heads) == (768, 12, 12)
    assert (base.embedding_size, base.intermediate_size, base.vocab_size) == (128, 3072, 30000)
    assert base.hidden_dropout_prob == 0.0 and base.sharing == "all" and base.hidden_act == "gelu"
    assert AlbertConfig.from_preset("albert_base_v1").hidden_dropout_prob == 0.1
    assert AlbertConfig.from_preset("albert_xxlarge_v1").hidden_dropout_prob == 0.0
    xx = AlbertConfig.from_preset("albert_xxlarge_v2")
    assert (xx.hidden_size, xx.num_hidden_layers, xx.num_attention_heads, xx.intermediate_size) == (4096, 12, 64, 16384)
    bert = AlbertConfig.from_preset("bert_base")
    assert bert.embedding_size == bert.hidden_size and bert.sharing == "none"
    for name in ("albert_base", "albert_large", "albert_xlarge", "albert_xxlarge"):
        for version in ("v1", "v2"):
            AlbertConfig.from_preset(f"{name}_{version}")
    AlbertConfig.from_preset("bert_large")


def test_unknown_preset_lists_choices():
    with pytest.raises(ValueError, match="albert_huge.*available"):
        AlbertConfig.from_preset("albert_huge")


def test_released_json_with_unused_keys_loads(tmp_path):
    released = {
        "attention_probs_dropout_prob": 0, "hidden_act": "gelu", "hidden_dropout_prob": 0,
        "embedding_size": 128, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
        "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
        "num_hidden_groups": 1, "net_structure_type": 0, "gap_size": 0, "num_memory_blocks": 0,
        "inner_group_num": 1, "down_scale_factor": 1, "type_vocab_size": 2, "vocab_size": 30000,
        "layers_to_keep": [],
    }
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(released))
    cfg = AlbertConfig.from_json_file(str(path))
    assert cfg == AlbertConfig.from_preset("albert_base_v2")


def test_json_round_trip(tmp_path):
    cfg = dataclasses.replace(AlbertConfig.tiny(), sharing="ffn", num_hidden_groups=2)
    path = str(tmp_path / "c.json")
    cfg.to_json_file(path)
    assert AlbertConfig.from_json_file(path) == cfg
    assert not [f for f in os.listdir(tmp_path) if "tmp" in f]


def test_typo_key_is_an_error():
    with pytest.raises(ValueError, match="hiden_size"):
        AlbertConfig.from_dict({"hiden_size": 8})


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(hidden_size=30, num_attention_heads=4), "hidden_size=30.*num_attention_heads=4"),
        (dict(num_hidden_groups=3, num_hidden_layers=2), "num_hidden_groups=3.*num_hidden_layers=2"),
        (dict(sharing="layers"), "sharing='layers'"),
        (dict(hidden_act="swish"), "hidden_act='swish'"),
        (dict(vocab_size=0), "vocab_size.*0"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob.*1.5"),
        (dict(embedding_size=2.5), "embedding_size.*2.5"),
    ],
)
def test_invalid_config_names_field_and_value(overrides, message):
    with pytest.raises(ValueError, match=message):
        AlbertConfig.tiny(**overrides)


def test_group_counts_per_sharing_mode():
    counts = {
        mode: (c.num_attention_groups, c.num_ffn_groups)
        for mode in ("all", "attention", "ffn", "none")
        for c in [AlbertConfig.tiny(num_hidden_layers=4, num_hidden_groups=2, sharing=mode)]
    }
    assert counts == {"all": (2, 2), "attention": (2, 4), "ffn": (4, 2), "none": (4, 4)}


def _released_large() -> dict:
    return {
        "attention_probs_dropout_prob": 0, "hidden_act": "gelu", "hidden_dropout_prob": 0,
        "embedding_size": 128, "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096,
        "max_position_embeddings": 512, "num_attention_heads": 16, "num_hidden_layers": 24,
        "type_vocab_size": 2, "vocab_size": 30000,
    }


def test_missing_field_is_an_error_naming_it_and_the_file(tmp_path):
    values = _released_large()
    del values["num_hidden_layers"]  # would silently train 12 layers with a default
    del values["intermediate_size"]
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError) as error:
        AlbertConfig.from_json_file(str(path))
    message = str(error.value)
    assert str(path) in message
    assert "'num_hidden_layers'" in message and "'intermediate_size'" in message
    assert "required" in message


def test_optional_fields_take_their_defaults():
    cfg = AlbertConfig.from_dict(_released_large())
    assert cfg == AlbertConfig.from_preset("albert_large_v2")
    assert (cfg.sharing, cfg.num_hidden_groups, cfg.inner_group_num, cfg.layer_norm_eps) == ("all", 1, 1, 1e-12)


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("num_hidden_layers", "24", "int"),
        ("num_hidden_layers", True, "int"),  # a bool is not a layer count
        ("hidden_size", 1024.0, "int"),
        ("hidden_dropout_prob", "0.1", "float"),
        ("initializer_range", None, "float"),
        ("hidden_act", 1, "str"),
        ("layer_norm_eps", False, "float"),
    ],
)
def test_wrong_type_names_field_value_and_type(tmp_path, field, value, expected):
    values = {**_released_large(), field: value}
    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError) as error:
        AlbertConfig.from_json_file(str(path))
    message = str(error.value)
    assert str(path) in message and field in message and repr(value) in message, message
    assert f" {expected}," in message, message
    with pytest.raises(ValueError, match=field):  # the constructor checks too
        AlbertConfig.tiny(**{field: value})


def test_ints_are_accepted_for_floats_and_stored_as_floats():
    cfg = AlbertConfig.tiny(hidden_dropout_prob=0, initializer_range=1, layer_norm_eps=1)
    assert (cfg.hidden_dropout_prob, cfg.initializer_range, cfg.layer_norm_eps) == (0.0, 1.0, 1.0)
    assert all(type(v) is float for v in (cfg.hidden_dropout_prob, cfg.initializer_range, cfg.layer_norm_eps))
    assert '"hidden_dropout_prob": 0.0' in cfg.to_json_string()


def test_layer_norm_eps_round_trips_and_must_be_positive(tmp_path):
    cfg = AlbertConfig.tiny(layer_norm_eps=1e-5)
    path = str(tmp_path / "albert_config.json")
    cfg.to_json_file(path)
    assert json.loads(open(path).read())["layer_norm_eps"] == 1e-5
    assert AlbertConfig.from_json_file(path).layer_norm_eps == 1e-5
    with pytest.raises(ValueError, match="layer_norm_eps.*0.0"):
        AlbertConfig.tiny(layer_norm_eps=0.0)
