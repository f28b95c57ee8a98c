"""albert-tf: ALBERT (A Lite BERT) for TensorFlow 2 and Keras 3."""

from albert_tf.config import AlbertConfig
from albert_tf.models import AlbertEncoder, AlbertPretrainer, pretraining_loss_terms, pretraining_losses
from albert_tf.models import (AlbertClassifier, AlbertMultipleChoice, AlbertSpanQA, AlbertTokenClassifier,
                              load_task_model, save_task_model)
from albert_tf.layers.preprocessor import AlbertTextPreprocessor
from albert_tf import optimizers

__version__ = "0.1.0"
from albert_tf.checkpoints import load_checkpoint, save_pretrained
from albert_tf.export import export_saved_model
from albert_tf.optimization import AdamWeightDecay, Lamb, WarmupPolynomialDecay, create_optimizer
from albert_tf.training import (
    OptimizationConfig,
    PretrainingDataConfig,
    RuntimeConfig,
    TrainingError,
    evaluate,
    get_strategy,
    run_evaluation,
    run_pretraining,
)
