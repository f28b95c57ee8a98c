"""Packed tokens: the encoder's inference on the real tokens only equals the padded computation
(at real positions, against the NumPy reference), with zeros at padding positions."""

import numpy as np
import pytest
import tensorflow as tf

import albert_tf
from albert_tf.checkpoints import original_variable_map
from albert_tf.config import AlbertConfig
from albert_tf.layers.token_packing import pack_tokens, token_packing, unpack_tokens, unpack_tokens_zero_padding
from tests.albert_tf import numpy_reference


def test_packing_indices_hand_worked():
    # Row 0: 2 real of 3; row 1: 1 real; row 2: a mask of zeros (a filler row) is kept whole.
    p = token_packing(tf.constant([[1, 1, 0], [1, 0, 0], [0, 0, 0]]))
    assert p.index.numpy().tolist() == [0, 1, 3, 6, 7, 8]
    assert p.unpack_index.numpy().tolist() == [0, 1, 1, 2, 2, 2, 3, 4, 5]
    assert p.mask.numpy().tolist() == [True, True, False, True, False, False, True, True, True]
    rows = tf.reshape(tf.range(9, dtype=tf.float32), [9, 1]) + 1.0
    packed = pack_tokens(rows, p)
    assert packed.numpy().ravel().tolist() == [1.0, 2.0, 4.0, 7.0, 8.0, 9.0]
    assert unpack_tokens(packed, p).numpy().ravel().tolist() == [1, 2, 2, 4, 4, 4, 7, 8, 9]
    assert unpack_tokens_zero_padding(packed, p).numpy().ravel().tolist() == [1, 2, 0, 4, 0, 0, 7, 8, 9]


def test_an_all_padding_filler_row_gets_the_padded_pooled_output():
    """Issue 29: with only its position 0 packed, a filler row's [CLS] attended to copies of position 0, while
    the padded computation attends to every (masked) position alike: another pooled output."""
    enc = _randomized(albert_tf.AlbertEncoder(AlbertConfig.tiny()))
    inputs = _mixed_lengths((4, 0, 2), length=4)
    assert not inputs["input_mask"][1].any()
    enc.inference_packs_tokens = False
    want = enc(inputs, training=False)
    enc.inference_packs_tokens = True
    got = enc(inputs, training=False)
    np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(got["sequence_output"][1], want["sequence_output"][1], atol=1e-5, rtol=0)
    # The filler row's output differs from one computed on its position 0 alone (what packing gave before):
    # the check above can fail.
    alone = {k: v[1:2, :1] for k, v in inputs.items()}
    enc.inference_packs_tokens = False
    first_only = enc(alone, training=False)["pooled_output"].numpy()[0]
    assert np.max(np.abs(first_only - want["pooled_output"].numpy()[1])) > 1e-2


def _randomized(model, seed=1):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(0.0, 0.3, size=v.shape).astype(np.float32) + (1.0 if "gamma" in v.path else 0.0))
    return model


def _mixed_lengths(lengths=(7, 3, 1, 5), length=7, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.array([[1] * n + [0] * (length - n) for n in lengths], np.int32)
    ids = rng.integers(5, 100, size=mask.shape).astype(np.int32) * mask
    seg = np.zeros_like(ids)
    seg[:, 2:] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg * mask}


@pytest.mark.parametrize("sharing", ["all", "none"])
def test_packed_inference_matches_numpy_reference(sharing):
    cfg = AlbertConfig.tiny(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2, sharing=sharing)
    pre = _randomized(albert_tf.AlbertPretrainer(cfg))
    inputs = _mixed_lengths()
    pre.encoder.inference_packs_tokens = True
    got = pre.encoder(inputs, training=False)
    weights = {name: v.numpy().astype(np.float64) for name, v in original_variable_map(pre).items()}
    ref_cfg = dict(hidden_size=cfg.hidden_size, num_hidden_layers=4, num_attention_heads=cfg.num_attention_heads,
                   inner_group_num=2, attention_groups=cfg.num_attention_groups, ffn_groups=cfg.num_ffn_groups)
    want = numpy_reference.forward(weights, ref_cfg, inputs["input_ids"], inputs["input_mask"],
                                   inputs["segment_ids"], np.zeros([4, 1], np.int32))
    real = inputs["input_mask"].astype(bool)
    np.testing.assert_allclose(got["sequence_output"].numpy()[real], want["sequence_output"][real],
                               atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(got["pooled_output"].numpy(), want["pooled_output"], atol=2e-4, rtol=1e-4)
    assert not np.any(got["sequence_output"].numpy()[~real])  # zeros at padding


def test_packed_equals_padded_in_a_dynamic_graph_and_every_layer():
    enc = _randomized(albert_tf.AlbertEncoder(AlbertConfig.tiny()))
    spec = {k: tf.TensorSpec([None, None], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    run = tf.function(lambda x: enc(x, training=False, return_all_layers=True), input_signature=[spec])
    for inputs in (_mixed_lengths(), _mixed_lengths((4, 4), length=4, seed=1)):
        enc.inference_packs_tokens = False
        want = run(inputs)
        enc.inference_packs_tokens = True
        run = tf.function(run.python_function, input_signature=[spec])  # retraced with packing
        got = run(inputs)
        real = inputs["input_mask"].astype(bool)
        for a, b in zip(got["all_layers"] + [got["sequence_output"]], want["all_layers"] + [want["sequence_output"]]):
            np.testing.assert_allclose(a.numpy()[real], b.numpy()[real], atol=1e-5)
        np.testing.assert_allclose(got["pooled_output"], want["pooled_output"], atol=1e-5)
        run = tf.function(run.python_function, input_signature=[spec])


def test_training_never_packs():
    enc = _randomized(albert_tf.AlbertEncoder(AlbertConfig.tiny()))
    enc.inference_packs_tokens = True
    inputs = _mixed_lengths()
    padded = enc(inputs, training=True)["sequence_output"].numpy()  # dropout 0 in tiny: deterministic
    assert np.all(padded[~inputs["input_mask"].astype(bool)] != 0)  # padding positions computed


def test_packed_classifier_in_bfloat16_close_to_float32():
    cfg = AlbertConfig.tiny()
    f32 = _randomized(albert_tf.AlbertClassifier(cfg, 3))
    bf16 = albert_tf.AlbertClassifier(cfg, 3, dtype="mixed_bfloat16")
    bf16.set_weights(f32.get_weights())
    for model in (f32, bf16):
        model.inference_rows_per_bucket = None
        model.encoder.inference_packs_tokens = True
    inputs = _mixed_lengths()
    want, got = f32(inputs, training=False).numpy(), tf.cast(bf16(inputs, training=False), tf.float32).numpy()
    assert np.max(np.abs(got - want)) <= 3e-2 * max(1.0, np.max(np.abs(want)))
