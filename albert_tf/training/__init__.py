"""The custom pretraining loop shared by the binaries (albert-pretrain, albert-demo).

Why a custom loop and not `model.fit`: Keras 3 `fit` breaks under
MultiWorkerMirroredStrategy and the optimizer's own gradient accumulation breaks
under every strategy (TensorFlow 2.21 / Keras 3.15). This loop runs
on any `tf.distribute` strategy, with exact big-batch gradient accumulation,
exact resume after a kill, and the original's losses.

The pieces, one module each:

* `configs`: `OptimizationConfig`, `RuntimeConfig`, `PretrainingDataConfig`,
  `RecoveryConfig` (filled once from flags with `from_flags`);
* `state`: `TrainState` (model, optimizer, schedule, step, RNG, loss scale,
  checkpoint manager), `restore_or_warm_start`, the recorded run settings;
* `step`: the distributed iterator (positioned for a resume) and the
  distributed step with accumulation over global denominators;
* `reporting`: `MetricsLogger` (log line, TensorBoard, callback) and
  `StopPolicy` (steps, time budget);
* `evaluation`: `evaluate`, `run_evaluation`, the end-of-training evaluation;
* `pretraining`: `run_pretraining`, the loop that ties them together;
* `healing`: --on_nonfinite=rollback (restore, skip the data, go on);
* `data_service`: the training input on tf.data service workers.

Strategy, chief and precision helpers live in `albert_tf.runtime` (re-exported
here as `get_strategy` and `is_chief`).
"""

from albert_tf.runtime import get_strategy, is_chief
from albert_tf.training.common import (
    CHECKPOINT_NAME,
    EVAL_RESULTS_FILENAME,
    RUN_SETTINGS_FILENAME,
    DatasetFn,
    TrainingError,
    write_eval_results,
    write_scalar_summary,
)
from albert_tf.training.configs import (
    OptimizationConfig,
    PretrainingDataConfig,
    RecoveryConfig,
    RuntimeConfig,
)
from albert_tf.training.evaluation import evaluate, run_evaluation
from albert_tf.training.pretraining import run_pretraining
from albert_tf.training.state import LossScale, TrainState

__all__ = [
    "CHECKPOINT_NAME", "EVAL_RESULTS_FILENAME", "RUN_SETTINGS_FILENAME",
    "DatasetFn", "LossScale", "OptimizationConfig", "PretrainingDataConfig",
    "RecoveryConfig", "RuntimeConfig", "TrainState", "TrainingError", "evaluate", "get_strategy",
    "is_chief", "run_evaluation", "run_pretraining", "write_eval_results",
    "write_scalar_summary",
]
