"""Keras models: the encoder, the pretrainer and task models."""

from albert_tf.models.encoder import AlbertEncoder
from albert_tf.models.pretrainer import AlbertPretrainer, pretraining_loss_terms, pretraining_losses
