import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.checkpoints import original_variable_map
from albert_tf.config import AlbertConfig

from . import numpy_reference


def _inputs(batch=2, length=7, vocab=100, seed=0, pad_last=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, size=(batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    if pad_last:
        mask[-1, length - pad_last:] = 0
        ids[-1, length - pad_last:] = 0
    seg = np.zeros_like(ids)
    seg[:, length // 2:] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg}


@pytest.mark.parametrize(
    "preset, expected",
    [
        ("albert_base_v2", 11_683_584),
        ("albert_large_v2", 17_683_968),
        ("albert_xlarge_v2", 58_724_864),
        ("albert_xxlarge_v2", 222_595_584),
    ],
)
def test_preset_parameter_counts(preset, expected):
    assert albert_tf.AlbertEncoder(AlbertConfig.from_preset(preset)).count_params() == expected


def _formula_count(c: AlbertConfig) -> int:
    V, E, H, I, P, T = c.vocab_size, c.embedding_size, c.hidden_size, c.intermediate_size, c.max_position_embeddings, c.type_vocab_size
    embeddings = (V + P + T) * E + 2 * E + (E * H + H if E != H else 0)
    attention = 4 * (H * H + H) + 2 * H
    ffn = H * I + I + I * H + H + 2 * H
    pooler = H * H + H
    K = c.inner_group_num
    return embeddings + K * (c.num_attention_groups * attention + c.num_ffn_groups * ffn) + pooler


@pytest.mark.parametrize("sharing, paper_millions", [("none", 89), ("attention", 64), ("ffn", 38), ("all", 12)])
def test_sharing_strategies_match_paper_table(sharing, paper_millions):
    # Lan et al. 2019, Table 4 (ALBERT-base, E=128): 89M / 64M / 38M / 12M.
    cfg = AlbertConfig.from_preset("albert_base_v2", sharing=sharing)
    count = albert_tf.AlbertEncoder(cfg).count_params()
    assert count == _formula_count(cfg)
    # The paper's figures are rounded inconsistently (89.65M is printed as 89M).
    assert abs(count / 1e6 - paper_millions) < 1.0


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_tiny_counts_with_groups_and_inner_blocks(sharing):
    cfg = AlbertConfig.tiny(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2, sharing=sharing)
    assert albert_tf.AlbertEncoder(cfg).count_params() == _formula_count(cfg)
    assert albert_tf.AlbertEncoder(AlbertConfig.tiny(embedding_size=32)).count_params() == _formula_count(
        AlbertConfig.tiny(embedding_size=32)
    )


def _randomize(model, seed=1):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0.0, 0.3, size=v.shape).astype(np.float32) + (1.0 if "gamma" in v.path else 0.0))


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_sharing_modes_match_numpy_reference(sharing):
    cfg = AlbertConfig.tiny(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2, sharing=sharing)
    pre = albert_tf.AlbertPretrainer(cfg)
    _randomize(pre)
    inputs = _inputs(pad_last=3)
    inputs["masked_lm_positions"] = np.array([[1, 2], [0, 3]], np.int32)
    got = pre(inputs)
    weights = {name: v.numpy().astype(np.float64) for name, v in original_variable_map(pre).items()}
    ref_cfg = dict(
        hidden_size=cfg.hidden_size,
        num_hidden_layers=4,
        num_attention_heads=cfg.num_attention_heads,
        inner_group_num=2,
        attention_groups=cfg.num_attention_groups,
        ffn_groups=cfg.num_ffn_groups,
    )
    want = numpy_reference.forward(
        weights, ref_cfg, inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"], inputs["masked_lm_positions"]
    )
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key], atol=2e-4, rtol=1e-4, err_msg=key)


def test_any_length_up_to_max_and_clear_error_beyond():
    cfg = AlbertConfig.tiny(max_position_embeddings=16)
    enc = albert_tf.AlbertEncoder(cfg)
    for length in (1, 5, 16):
        out = enc(_inputs(length=length))
        assert out["sequence_output"].shape == (2, length, 32)
        assert out["pooled_output"].shape == (2, 32)
    with pytest.raises(ValueError, match="17.*max_position_embeddings=16"):
        enc(_inputs(length=17))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def dynamic(ids):
        return enc({"input_ids": ids})["pooled_output"]

    assert dynamic(tf.ones([1, 16], tf.int32)).shape == (1, 32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings=16"):
        dynamic(tf.ones([1, 17], tf.int32))


def test_padding_does_not_change_real_positions():
    enc = albert_tf.AlbertEncoder(AlbertConfig.tiny())
    _randomize(enc)
    short = _inputs(batch=1, length=6)
    padded = {k: np.pad(v, [[0, 0], [0, 4]]) for k, v in short.items()}
    a = enc(short)["sequence_output"].numpy()
    b = enc(padded)["sequence_output"].numpy()[:, :6]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_default_mask_and_segments():
    enc = albert_tf.AlbertEncoder(AlbertConfig.tiny())
    ids = _inputs()["input_ids"]
    explicit = enc({"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)})
    implicit = enc({"input_ids": ids})
    np.testing.assert_array_equal(explicit["pooled_output"].numpy(), implicit["pooled_output"].numpy())
    with pytest.raises(ValueError, match="input_ids"):
        enc({"ids": ids})


def test_dropout_only_in_training():
    cfg = AlbertConfig.tiny(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    enc = albert_tf.AlbertEncoder(cfg)
    inputs = _inputs()
    a = enc(inputs, training=False)["sequence_output"].numpy()
    b = enc(inputs)["sequence_output"].numpy()
    c = enc(inputs, training=True)["sequence_output"].numpy()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3


# Unit roundoff of each compute dtype (half the gap between 1 and the next number): 8 and 11 significant bits.
UNIT_ROUNDOFF = {"bfloat16": 2.0**-8, "float16": 2.0**-11}


def _relative_rms(got, want):
    """RMS of got - want over the spread (standard deviation) of want: 0 when equal, about 1.4 for unrelated rows."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.sqrt(np.mean((got - want) ** 2)) / want.std())


@pytest.mark.parametrize("policy, dtype", [("mixed_bfloat16", "bfloat16"), ("mixed_float16", "float16")])
def test_mixed_precision(policy, dtype):
    """A mixed model with the float32 model's randomised weights (outputs of order 1) equals it up to rounding.

    The bound is relative to each output's spread: an RMS error of at most 32 unit roundoffs of the compute
    dtype (bfloat16 0.125, float16 0.016 of the spread). Measured with these weights: bfloat16 up to 0.04,
    float16 up to 0.0065 (bfloat16's 3 fewer significand bits: about 8 times the error, as expected); over
    five weight seeds the largest were 0.057 and 0.0078. Rows rolled by one (another text's outputs) are
    0.65-1.5 away, and zeros at least 1, so a wrong answer fails the same bound.
    """
    cfg = AlbertConfig.tiny()
    reference = albert_tf.AlbertPretrainer(cfg)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        mixed = albert_tf.AlbertPretrainer(cfg)
    finally:
        keras.config.set_dtype_policy(previous)
    inputs = dict(_inputs(batch=4, pad_last=2), masked_lm_positions=np.array([[1, 2], [3, 4]] * 2, np.int32))
    reference(inputs)
    _randomize(reference, seed=1)
    mixed.set_weights(reference.get_weights())
    assert all(v.dtype == "float32" for v in mixed.weights)
    for norm in (mixed.encoder.embeddings.layer_norm, mixed.encoder.transformer.attention_groups[0][0].layer_norm):
        assert norm.compute_dtype == "float32"
    assert mixed.encoder.transformer.attention_groups[0][0].query.compute_dtype == dtype
    got, want = mixed(inputs), reference(inputs)
    assert got["mlm_logits"].dtype == tf.float32 and got["sop_logits"].dtype == tf.float32
    bound = 32 * UNIT_ROUNDOFF[dtype]
    for key in ("sequence_output", "pooled_output", "mlm_logits", "sop_logits"):
        want_key = want[key].numpy()
        assert want_key.std() > 0.5, (key, want_key.std())  # randomised weights: outputs of order 1
        assert _relative_rms(got[key], want_key) < bound, (key, _relative_rms(got[key], want_key), bound)
        # Companions: another row's outputs and all zeros are wrong answers the bound rejects.
        assert _relative_rms(np.roll(want_key, 1, axis=0), want_key) > 4 * bound, key
        assert _relative_rms(np.zeros_like(want_key), want_key) > 4 * bound, key
    # The gradient flows through a mixed model (float32 variables).
    with tf.GradientTape() as tape:
        out = mixed(inputs, training=True)
        loss = tf.reduce_sum(out["mlm_logits"]) + tf.reduce_sum(out["sop_logits"])
    grads = tape.gradient(loss, mixed.trainable_variables)
    assert all(g is not None for g in grads)


def test_get_config_round_trip_and_weights(tmp_path):
    cfg = dataclasses.replace(AlbertConfig.tiny(), sharing="attention", num_hidden_layers=3)
    enc = albert_tf.AlbertEncoder(cfg)
    clone = albert_tf.AlbertEncoder.from_config(enc.get_config())
    assert clone.config == cfg
    path = str(tmp_path / "enc.weights.h5")
    enc.save_weights(path)
    clone.load_weights(path)
    inputs = _inputs()
    np.testing.assert_array_equal(enc(inputs)["sequence_output"].numpy(), clone(inputs)["sequence_output"].numpy())
