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
