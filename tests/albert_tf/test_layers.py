import math

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.layers import attention_mask_bias, get_activation, group_for_layer


def test_gelu_variants_match_their_formulas():
    x = np.linspace(-6, 6, 101).astype(np.float32)
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    erf_form = 0.5 * x * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    np.testing.assert_allclose(get_activation("gelu")(x), tanh_form, atol=1e-6)
    np.testing.assert_allclose(get_activation("gelu_new")(x), tanh_form, atol=1e-6)
    np.testing.assert_allclose(get_activation("gelu_exact")(x), erf_form, atol=1e-6)
    # The two forms differ measurably, so a swapped mapping would be caught.
    assert np.abs(tanh_form - erf_form).max() > 1e-4
    with pytest.raises(ValueError, match="'swish'"):
        get_activation("swish")


def test_group_for_layer_is_the_original_float_mapping():
    # The original (modeling.py) computes, in Python floating point,
    # int(layer_idx / num_hidden_layers * num_hidden_groups); enumerate every
    # L, G in 1..30 (G <= L) against that expression.
    differs_from_integer_division = []
    for layers in range(1, 31):
        for groups in range(1, layers + 1):
            for layer in range(layers):
                expected = int(layer / layers * groups)
                assert group_for_layer(layer, layers, groups) == expected, (layer, layers, groups)
                if expected != layer * groups // layers:
                    differs_from_integer_division.append((layer, layers, groups))
    # The enumeration covers the cases where the float rounds down, e.g.
    # 15 / 22 * 22 = 14.999999999999998: layer 15 of 22 uses group 14.
    assert (15, 22, 22) in differs_from_integer_division
    assert group_for_layer(15, 22, 22) == 14
    # Hand-worked: 12 layers in 3 groups of 4.
    assert [group_for_layer(l, 12, 3) for l in range(12)] == [0] * 4 + [1] * 4 + [2] * 4


def test_attention_mask_bias():
    bias = attention_mask_bias(tf.constant([[1, 1, 0]])).numpy()
    assert bias.shape == (1, 1, 1, 3)
    np.testing.assert_array_equal(bias[0, 0, 0], [0.0, 0.0, -10000.0])
