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


@pytest.mark.parametrize("layers, groups", [(12, 1), (12, 2), (12, 3), (24, 5), (4, 4), (7, 3)])
def test_group_for_layer_is_the_original_mapping(layers, groups):
    # The original computes int(layer_idx / num_hidden_layers * num_hidden_groups).
    expected = [int(l / layers * groups) for l in range(layers)]
    assert [group_for_layer(l, layers, groups) for l in range(layers)] == expected
    assert sorted(set(expected)) == list(range(groups))


def test_attention_mask_bias():
    bias = attention_mask_bias(tf.constant([[1, 1, 0]])).numpy()
    assert bias.shape == (1, 1, 1, 3)
    np.testing.assert_array_equal(bias[0, 0, 0], [0.0, 0.0, -10000.0])
