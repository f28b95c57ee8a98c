"""albert-tf: ALBERT (A Lite BERT) for TensorFlow 2 and Keras 3.

The names below are imported on first use (PEP 562), so that `import
albert_tf` -- and with it every console script -- starts without TensorFlow;
the binaries then keep its start-up log quiet (albert_tf/bin/common.py).
"""

import importlib

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "AlbertConfig": "albert_tf.config",
    "AlbertEncoder": "albert_tf.models",
    "AlbertPretrainer": "albert_tf.models",
    "pretraining_loss_terms": "albert_tf.models",
    "pretraining_losses": "albert_tf.models",
    "AlbertClassifier": "albert_tf.models",
    "AlbertMultipleChoice": "albert_tf.models",
    "AlbertSpanQA": "albert_tf.models",
    "AlbertTokenClassifier": "albert_tf.models",
    "load_task_model": "albert_tf.models",
    "save_task_model": "albert_tf.models",
    "AlbertTextPreprocessor": "albert_tf.layers.preprocessor",
    "load_checkpoint": "albert_tf.checkpoints",
    "save_pretrained": "albert_tf.checkpoints",
    "export_saved_model": "albert_tf.export",
    "AdamWeightDecay": "albert_tf.optimization",
    "Lamb": "albert_tf.optimization",
    "WarmupPolynomialDecay": "albert_tf.optimization",
    "create_optimizer": "albert_tf.optimization",
    "OptimizationConfig": "albert_tf.training",
    "PretrainingDataConfig": "albert_tf.training",
    "RuntimeConfig": "albert_tf.training",
    "TrainingError": "albert_tf.training",
    "evaluate": "albert_tf.training",
    "get_strategy": "albert_tf.training",
    "run_evaluation": "albert_tf.training",
    "run_pretraining": "albert_tf.training",
}
_SUBMODULES = ("optimizers",)

__all__ = sorted(_EXPORTS) + list(_SUBMODULES)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        try:  # a submodule, e.g. albert_tf.metrics after a bare `import albert_tf`
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
