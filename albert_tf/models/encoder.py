"""AlbertEncoder: embeddings -> E->H projection -> shared transformer stack -> pooler."""

from typing import Dict, Mapping

import keras
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.models.config_model import ConfigModel
from albert_tf.layers.attention import attention_mask_bias
from albert_tf.layers.embeddings import AlbertEmbeddings
from albert_tf.layers.fused import flatten_tokens, unflatten_tokens
from albert_tf.layers import token_packing
from albert_tf.layers.transformer_stack import AlbertTransformerStack

ENCODER_INPUTS = ("input_ids", "input_mask", "segment_ids")


def _dummy_inputs() -> Dict[str, tf.Tensor]:
    ids = tf.constant([[2, 3]], tf.int32)
    return {"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}


class AlbertEncoder(ConfigModel):
    """The ALBERT encoder (backbone) with its pooler.

    Inputs are a dict of int32 [B, T] tensors: `input_ids`, and optionally
    `input_mask` (1 = real token; default all ones) and `segment_ids`
    (default zeros). Other keys are ignored. Outputs are a dict with
    `sequence_output` [B, T, H] and `pooled_output` [B, H] (tanh of a dense
    layer on the [CLS] position). Works at any T <= max_position_embeddings.
    The model is built (all weights created) at construction. With
    `inference_packs_tokens = True`, inference runs the dense layers on the
    real tokens only (`albert_tf.layers.token_packing`; the OpenVINO export's
    default): the same outputs at real positions, 0 at padding positions
    (a row without any real token is computed whole, as padded inference does).

    Args:
        config: an `AlbertConfig`.
        **kwargs: passed to `keras.Model` (e.g. `name`, `dtype`).

    Example:
    >>> import albert_tf, tensorflow as tf
    >>> enc = albert_tf.AlbertEncoder(albert_tf.AlbertConfig.tiny())
    >>> ids = tf.constant([[2, 17, 43, 3]])
    >>> out = enc({"input_ids": ids, "input_mask": tf.ones_like(ids),
    ...            "segment_ids": tf.zeros_like(ids)})
    >>> out["sequence_output"].shape, out["pooled_output"].shape
    (TensorShape([1, 4, 32]), TensorShape([1, 32]))
    """

    # Inference (not training) runs the dense layers on the real tokens only
    # (`albert_tf.layers.token_packing`); sequence_output is then 0 at padding.
    inference_packs_tokens = False

    def __init__(self, config: AlbertConfig, **kwargs):
        kwargs.setdefault("name", "albert_encoder")
        super().__init__(**kwargs)
        if not isinstance(config, AlbertConfig):
            raise TypeError(f"config must be an AlbertConfig, got {type(config).__name__}.")
        self.config = config
        init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        self.embeddings = AlbertEmbeddings(
            config.vocab_size,
            config.embedding_size,
            config.max_position_embeddings,
            config.type_vocab_size,
            config.initializer_range,
            config.hidden_dropout_prob,
            layer_norm_eps=config.layer_norm_eps,
            name="embeddings",
        )
        # As the original: the E -> H projection exists only when E != H.
        self.embedding_projection = None
        if config.embedding_size != config.hidden_size:
            self.embedding_projection = keras.layers.Dense(
                config.hidden_size,
                kernel_initializer=init,
                name="embedding_projection",
                dtype=self.dtype_policy,
            )
        self.transformer = AlbertTransformerStack(config, name="transformer", dtype=self.dtype_policy)
        self.pooler = keras.layers.Dense(
            config.hidden_size,
            activation="tanh",
            kernel_initializer=init,
            name="pooler",
            dtype=self.dtype_policy,
        )
        self(_dummy_inputs())

    def call(self, inputs: Mapping[str, tf.Tensor], training=None, return_all_layers: bool = False,
             pooled_output_only: bool = False, output_positions=None):
        """The outputs of `inputs` (see the class docstring).

        For heads that read a few positions of the last layer, the last block can compute only those (every
        position still a key of its attention), with the same results there; its dense layers then run on a
        few rows a sequence instead of all of them:

        - `pooled_output_only`: returns only `pooled_output` (the last block at [CLS] only).
        - `output_positions` (int [B, Q]): returns `pooled_output` and `position_output` [B, Q, H], the last
          layer at those positions (the last block at [CLS] and them), e.g. the masked positions of MLM.
        """
        if not isinstance(inputs, Mapping) or "input_ids" not in inputs:
            raise ValueError(
                "AlbertEncoder expects a dict with at least 'input_ids' (and optionally "
                f"'input_mask', 'segment_ids'), got {type(inputs).__name__}"
                + (f" with keys {sorted(inputs)}" if isinstance(inputs, Mapping) else "")
                + "."
            )
        selected = pooled_output_only or output_positions is not None
        if selected and return_all_layers:
            raise ValueError("pooled_output_only and output_positions compute the last block at a few positions; "
                             "they cannot return_all_layers.")
        input_ids = tf.cast(inputs["input_ids"], tf.int32)
        if input_ids.shape.rank != 2:
            raise ValueError(f"input_ids must have shape [batch, seq_length], got {input_ids.shape}.")
        input_mask = inputs.get("input_mask")
        input_mask = tf.ones_like(input_ids) if input_mask is None else tf.cast(input_mask, tf.int32)
        segment_ids = inputs.get("segment_ids")
        segment_ids = tf.zeros_like(input_ids) if segment_ids is None else tf.cast(segment_ids, tf.int32)

        x = self.embeddings(input_ids, segment_ids, training=training)
        if self.embedding_projection is not None:
            x = self.embedding_projection(x)
        mask_bias = attention_mask_bias(input_mask)
        positions = None
        if selected:  # [CLS] first, then the positions asked for
            positions = tf.zeros([tf.shape(input_ids)[0], 1], tf.int32)
            if output_positions is not None:
                positions = tf.concat([positions, tf.cast(output_positions, tf.int32)], axis=1)
        if self.inference_packs_tokens and not training:
            packing = token_packing.token_packing(input_mask)
            layers = self.transformer(token_packing.pack_tokens(flatten_tokens(x), packing), mask_bias,
                                      training=training, packing=packing,
                                      last_block_positions=positions)
            if not selected:
                # Only what is returned goes back to [B, T, H].
                layers = [unflatten_tokens(token_packing.unpack_tokens_zero_padding(p, packing), x) if keep else p
                          for keep, p in zip([return_all_layers] * (len(layers) - 1) + [True], layers)]
        else:
            layers = self.transformer(x, mask_bias, training=training, last_block_positions=positions)
        pooled_output = self.pooler(layers[-1][:, 0])
        if selected:
            outputs = {"pooled_output": pooled_output}
            if output_positions is not None:
                outputs["position_output"] = layers[-1][:, 1:]
            return outputs
        outputs = {"sequence_output": layers[-1], "pooled_output": pooled_output}
        if return_all_layers:
            outputs["all_layers"] = layers
        return outputs
