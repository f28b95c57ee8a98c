"""Keras layers of ALBERT: embeddings, attention, FFN, shared stack, heads."""

from albert_tf.layers.activations import get_activation
from albert_tf.layers.attention import AlbertAttention, attention_mask_bias
from albert_tf.layers.embeddings import AlbertEmbeddings, layer_norm
from albert_tf.layers.feed_forward import AlbertFeedForward
from albert_tf.layers.heads import MaskedLMHead, SentenceOrderHead
from albert_tf.layers.transformer_stack import AlbertTransformerStack, group_for_layer
