"""The L-layer encoder stack with cross-layer parameter sharing."""

from typing import List

import keras

from albert_tf.config import AlbertConfig
from albert_tf.layers.attention import AlbertAttention
from albert_tf.layers.feed_forward import AlbertFeedForward


def group_for_layer(layer_index: int, num_layers: int, num_groups: int) -> int:
    """The parameter group used by a layer: `int(l / L * G)`, as the original.

    The original computes it in floating point (`int(layer_idx /
    num_hidden_layers * num_hidden_groups)`), which differs from the exact
    `l * G // L` for some (l, L, G); checkpoints trained by the original load
    with the mapping it ran, so this follows it.

    Args:
        layer_index: l in [0, L).
        num_layers: L.
        num_groups: G.

    Returns:
        The group index.

    Example:
    >>> group_for_layer(15, 22, 22), 15 * 22 // 22  # the float rounds 15/22*22 down
    (14, 15)
    """
    return int(layer_index / num_layers * num_groups)


class AlbertTransformerStack(keras.layers.Layer):
    """L layers of attention + FFN blocks that reuse parameter groups.

    Each parameter group holds K inner blocks (`inner_group_num`) applied in
    sequence inside a layer. Attention and FFN sublayers are grouped separately
    so that the four sharing strategies of the paper fall out of one rule:

    | sharing     | attention groups | FFN groups |
    |-------------|------------------|------------|
    | "all"       | G                | G          |
    | "attention" | G                | L          |
    | "ffn"       | L                | G          |
    | "none"      | L                | L          |

    Layer l uses attention group int(l / L * Ga) and FFN group int(l / L * Gf); with
    "all" this is exactly the original's `group_<g>/inner_group_<k>` layout.

    Args:
        config: an `AlbertConfig`.

    Example:
    >>> import tensorflow as tf
    >>> from albert_tf.layers import attention_mask_bias
    >>> stack = AlbertTransformerStack(AlbertConfig.tiny())
    >>> x = tf.random.normal([1, 5, 32])
    >>> stack(x, attention_mask_bias(tf.ones([1, 5])))[-1].shape
    TensorShape([1, 5, 32])
    """

    def __init__(self, config: AlbertConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        c = config
        self.attention_groups: List[List[AlbertAttention]] = [
            [
                AlbertAttention(
                    c.hidden_size,
                    c.num_attention_heads,
                    c.initializer_range,
                    c.attention_probs_dropout_prob,
                    c.hidden_dropout_prob,
                    layer_norm_eps=c.layer_norm_eps,
                    name=f"attention_group_{g}_inner_{k}",
                    dtype=self.dtype_policy,
                )
                for k in range(c.inner_group_num)
            ]
            for g in range(c.num_attention_groups)
        ]
        self.ffn_groups: List[List[AlbertFeedForward]] = [
            [
                AlbertFeedForward(
                    c.hidden_size,
                    c.intermediate_size,
                    c.hidden_act,
                    c.initializer_range,
                    c.hidden_dropout_prob,
                    layer_norm_eps=c.layer_norm_eps,
                    name=f"ffn_group_{g}_inner_{k}",
                    dtype=self.dtype_policy,
                )
                for k in range(c.inner_group_num)
            ]
            for g in range(c.num_ffn_groups)
        ]

        # tf.train.Checkpoint does not follow layers held in (nested) lists, so
        # each sublayer is also a named attribute.
        for g, group in enumerate(self.attention_groups):
            for k, layer in enumerate(group):
                setattr(self, f"attention_{g}_{k}", layer)
        for g, group in enumerate(self.ffn_groups):
            for k, layer in enumerate(group):
                setattr(self, f"ffn_{g}_{k}", layer)

    def call(self, x, mask_bias, training=None, packing=None, last_block_positions=None):
        """Returns the output of every inner block: a list of L*K tensors [B, T, H]
        (with `packing`, x and the outputs are the real tokens [N, H]: see
        `albert_tf.layers.token_packing`). With `last_block_positions` (int [B, Q]),
        the last block computes those positions of each row only: its output is [B, Q, H]
        (`AlbertAttention`'s `query_positions`)."""
        c = self.config
        outputs = []
        last_block = c.num_hidden_layers * c.inner_group_num - 1
        for layer_index in range(c.num_hidden_layers):
            attention = self.attention_groups[
                group_for_layer(layer_index, c.num_hidden_layers, c.num_attention_groups)
            ]
            ffn = self.ffn_groups[group_for_layer(layer_index, c.num_hidden_layers, c.num_ffn_groups)]
            for k in range(c.inner_group_num):
                positions = last_block_positions if len(outputs) == last_block else None
                x = attention[k](x, mask_bias, training=training, packing=packing, query_positions=positions)
                x = ffn[k](x, training=training)
                outputs.append(x)
        return outputs

    def get_config(self):
        config = super().get_config()
        config["config"] = self.config.to_dict()
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(AlbertConfig(**config.pop("config")), **config)
