"""Keras models: the encoder, the pretrainer and task models."""

from albert_tf.models.encoder import AlbertEncoder
from albert_tf.models.pretrainer import AlbertPretrainer, pretraining_loss_terms, pretraining_losses
from albert_tf.models.classifier import AlbertClassifier
from albert_tf.models.multiple_choice import AlbertMultipleChoice
from albert_tf.models.span_qa import AlbertSpanQA
from albert_tf.models.task_io import load_task_model, save_task_model
from albert_tf.models.token_classifier import AlbertTokenClassifier
