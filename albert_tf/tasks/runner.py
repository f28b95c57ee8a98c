"""Fine-tuning driver shared by albert-finetune, albert-demo and the benchmark.

`run_finetuning(FinetuneOptions(...))` reads the task's splits, builds and
compiles the task model inside `strategy.scope()`, trains with `model.fit`
(progress line, TensorBoard scalars, resume state, best-on-dev model) and
writes the results:

    output_dir/
      albert_config.json, model.weights.safetensors, task_config.json, spm.model
                                   the fine-tuned model (best on dev), read by
                                   albert_tf.load_task_model / load_checkpoint /
                                   albert-export as it is
      eval_results.txt             ``key = value`` lines (--do_eval)
      test_results.tsv, ...        the task's prediction files (--do_predict)
      best_dev.json, resume/, train/, eval/   run state and summaries

Running the same options again after an interruption resumes from the last
resume checkpoint (every --save_checkpoints_steps steps and at each epoch end)
at the exact data position; a finished run is not trained again, and other
settings in the same output_dir are refused (`run_settings`) once a run there
has trained its first step. Without --max_seq_length the length is the
model's (`resolve_max_seq_length`). Without --do_train, --do_eval/--do_predict
read the fine-tuned model of --init_checkpoint (else of output_dir) and write
only to output_dir (`albert_tf/tasks/evaluation_only.py`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from absl import logging

from albert_tf.tasks.base import FinetuneTask, TaskOptions
from albert_tf.tasks.run_state import (  # noqa: F401 (the runner's names since they were written)
    RUN_STATE_FILE, SETTINGS_ADDED_LATER, file_sha256, record_run_state, resolved_adam_epsilon, run_settings)
from albert_tf.tasks.run_state import check_run_state as _check_run_state

EVAL_RESULTS_FILE = "eval_results.txt"
OPTIMIZERS = ("adamw", "adamw_original")  # --optimizer: bias-corrected AdamW, the original's AdamW


@dataclasses.dataclass
class FinetuneOptions:
    """Everything one fine-tuning run needs (albert-finetune's flags).

    Attributes:
        task: "glue/sst-2", "csv", "squad_v1", "squad_v2", "race", "tagging", ...
        data_dir: the task's files.
        output_dir: where the model and results go.
        init_checkpoint: pretrained weights (anything load_checkpoint reads).
        albert_config_file: albert_config.json for random initialisation.
        config: an `AlbertConfig` instead of albert_config_file (Python use).
        task_options: reader/model settings (`TaskOptions`).
        train_batch_size / eval_batch_size: global batch sizes.
        learning_rate / num_train_epochs / warmup_proportion / weight_decay_rate:
            AdamW and its linear warmup + linear decay schedule.
        train_step / warmup_step: the run's optimizer steps and warmup steps
            (the original run_classifier / run_race flags), instead of
            num_train_epochs / warmup_proportion; None: from those.
        optimizer: "adamw" (bias-corrected, as Hugging Face) or
            "adamw_original" (the original ALBERT's AdamW, no bias correction).
        layerwise_lr_decay: per-layer learning-rate factor from the top, or None.
        steps_per_epoch: steps per Keras epoch (checkpoint/dev interval);
            None = one pass over the training data.
        strategy / tpu / num_gpus: `albert_tf.runtime.get_strategy` arguments.
        mixed_precision: auto, float32, bfloat16 or float16.
        jit_compile: XLA-compile the training step (forward, backward, the
            task loss, AdamW with its clipping) and inference; the text layer
            then runs in the input pipeline (`albert_tf.tasks.static_shapes`).
        do_train / do_eval / do_predict: what to run.
        seed: head initialisation, dropout and data order.
        log_steps: progress line and summary interval.
        save_checkpoints_steps: resume state every N steps (and at each Keras
            epoch end); None or 0: only at epoch ends.
        on_nonfinite: "stop" (the only choice here): a non-finite loss ends
            the run in one line naming the step and the last good resume
            checkpoint (`callbacks.StopOnNonFinite`).
        defaulted: names of `albert_tf.finetune_defaults.SIZE_DEPENDENT`
            the user did not give (albert-finetune: the flags not on its
            command line); a small model gets the small recipe's values for
            them (`finetune_defaults.apply_size_defaults`). Empty: every value
            is used as given.
        allow_other_vocabulary: use an explicit spm_model_file other than
            the vocabulary beside init_checkpoint (or, evaluating, the saved
            model's) with a WARNING, instead of refusing it
            (`albert_tf.vocabulary_check.check_folder_vocabulary`).
    """

    task: str
    data_dir: str
    output_dir: str
    init_checkpoint: Optional[str] = None
    albert_config_file: Optional[str] = None
    config: Any = None
    task_options: TaskOptions = dataclasses.field(default_factory=TaskOptions)
    train_batch_size: int = 32
    eval_batch_size: int = 64
    learning_rate: float = 3e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    weight_decay_rate: float = 0.01
    layerwise_lr_decay: Optional[float] = None
    optimizer: str = "adamw"
    adam_epsilon: Optional[float] = None  # None: 1e-8 for adamw, 1e-6 for adamw_original
    train_step: Optional[int] = None
    warmup_step: Optional[int] = None
    steps_per_epoch: Optional[int] = None
    strategy: str = "default"
    tpu: Optional[str] = None
    num_gpus: Optional[int] = None
    mixed_precision: str = "auto"
    jit_compile: bool = False
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    seed: int = 12345
    log_steps: int = 50
    save_checkpoints_steps: Optional[int] = 1000
    on_nonfinite: str = "stop"
    defaulted: Tuple[str, ...] = ()
    allow_other_vocabulary: bool = False

    def validate(self) -> None:
        """Raises ValueError naming the flag for inconsistent options."""
        if not (self.do_train or self.do_eval or self.do_predict):
            raise ValueError("Nothing to do: give --do_train, --do_eval and/or --do_predict.")
        if not self.output_dir:
            raise ValueError("--output_dir is required.")
        if not self.data_dir:
            raise ValueError("--data_dir is required.")
        import tensorflow as tf  # gfile: the folders may be gs:// URLs

        if not tf.io.gfile.isdir(self.data_dir):
            raise FileNotFoundError(f"--data_dir={self.data_dir!r} is not a folder.")
        if self.do_train and sum(bool(x) for x in (self.init_checkpoint, self.albert_config_file,
                                                   self.config)) != 1:
            raise ValueError(
                "Training needs exactly one of --init_checkpoint (pretrained weights) and "
                f"--albert_config_file (random init); got init_checkpoint={self.init_checkpoint!r}, "
                f"albert_config_file={self.albert_config_file!r}.")
        for name in ("train_batch_size", "eval_batch_size", "log_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive, got {getattr(self, name)!r}.")
        if self.learning_rate <= 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate!r}.")
        if self.num_train_epochs <= 0:
            raise ValueError(f"--num_train_epochs must be positive, got {self.num_train_epochs!r}.")
        if not 0.0 <= self.warmup_proportion < 1.0:
            raise ValueError(f"--warmup_proportion must be in [0, 1), got {self.warmup_proportion!r}.")
        if self.train_step is not None and self.train_step <= 0:
            raise ValueError(f"--train_step must be positive, got {self.train_step!r}.")
        if self.warmup_step is not None and not 0 <= self.warmup_step < (self.train_step or float("inf")):
            raise ValueError(f"--warmup_step must be in [0, --train_step={self.train_step}), got {self.warmup_step!r}.")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}.")
        if self.adam_epsilon is not None and not self.adam_epsilon > 0:
            raise ValueError(f"--adam_epsilon must be positive, got {self.adam_epsilon!r}.")
        if self.layerwise_lr_decay is not None and not 0.0 < self.layerwise_lr_decay <= 1.0:
            raise ValueError(f"--layerwise_lr_decay must be in (0, 1], got {self.layerwise_lr_decay!r}.")
        if self.on_nonfinite != "stop":
            raise ValueError(f"--on_nonfinite={self.on_nonfinite!r}: albert-finetune supports 'stop' only "
                             "(rollback is albert-pretrain's).")
        if self.save_checkpoints_steps is not None and self.save_checkpoints_steps < 0:
            raise ValueError(f"--save_checkpoints_steps must be >= 0, got {self.save_checkpoints_steps!r}.")
        if self.steps_per_epoch is not None and self.steps_per_epoch <= 0:
            raise ValueError(f"--steps_per_epoch must be positive, got {self.steps_per_epoch!r}.")
        if self.strategy == "multi_worker_mirrored":
            # Keras 3.15 fit fails under this strategy (keras-team/keras#20585).
            raise ValueError(
                "--strategy='multi_worker_mirrored' does not work with Keras model.fit in Keras 3.15; "
                "fine-tune on one host (--strategy=mirrored for several GPUs).")
        if self.task_options.static_length_step < 1:
            raise ValueError(f"--static_length_step must be positive, got {self.task_options.static_length_step!r}.")
        if self.task_options.max_seq_length is not None and self.task_options.max_seq_length < 8:
            raise ValueError(f"--max_seq_length must be at least 8, got {self.task_options.max_seq_length!r}.")


# ------------------------------------------------------------------ helpers
def find_spm_model(options: FinetuneOptions) -> str:
    """The SentencePiece model: --spm_model_file, else the one of the --init_checkpoint folder, else
    the one in output_dir (a resumed or evaluation-only run), found by `albert_tf.model_folder.find_vocabulary`.

    Args:
        options: the run's options.

    Raises:
        FileNotFoundError: --spm_model_file does not exist, or no folder holds one (one line naming
            what was looked for, and where).
    """
    import tensorflow as tf

    from albert_tf import model_folder

    given = options.task_options.spm_model_file
    if given:
        if not tf.io.gfile.exists(given):
            raise FileNotFoundError(f"--spm_model_file={given!r} does not exist.")
        check_given_vocabulary(options, given)
        return given
    folders = [options.init_checkpoint] if options.init_checkpoint else []
    folders.append(options.output_dir)
    if not options.do_train:  # the evaluated model's own (albert_tf/tasks/evaluation_only.py)
        folders = [_evaluated_folder(options)[0]]
    for folder in folders:
        found = model_folder.find_vocabulary(folder)
        if found is not None:
            return found
    raise FileNotFoundError(
        "No SentencePiece model: give --spm_model_file (looked for "
        f"{' and for '.join(model_folder.vocabulary_search_text(f) for f in folders)}).")


def check_given_vocabulary(options: FinetuneOptions, given: str) -> None:
    """An explicit --spm_model_file against the vocabulary of the model the run reads: --init_checkpoint's
    when training from it, the evaluated model's when evaluating (a resume's is in its run settings).

    Raises:
        albert_tf.vocabulary_check.VocabularyMismatch: another vocabulary, unless allow_other_vocabulary
            (one line naming both files).
    """
    from albert_tf.vocabulary_check import check_folder_vocabulary

    if options.do_train:
        check_folder_vocabulary(given, options.init_checkpoint, "--init_checkpoint", options.allow_other_vocabulary)
    else:
        check_folder_vocabulary(given, *_evaluated_folder(options), options.allow_other_vocabulary)


def _evaluated_folder(options: FinetuneOptions):
    """(folder, flag) of the fine-tuned model an evaluation-only run reads (`evaluation_only.model_folder`)."""
    from albert_tf.tasks import evaluation_only

    folder = evaluation_only.model_folder(options)
    return folder, "--output_dir" if folder == options.output_dir else "--init_checkpoint"


def training_schedule(num_examples: int, options: FinetuneOptions) -> Dict[str, int]:
    """Steps of the run as the original counts them, split into Keras epochs.

    ``total = int(num_examples / batch * epochs)`` (at least 1) exactly,
    warmup = ``int(total * warmup_proportion)``. Keras epochs (the dev
    evaluation interval) hold ``steps_per_epoch`` steps, default one pass
    ``ceil(num_examples / batch)``, evened out over the
    ``epochs = ceil(total / steps_per_epoch)`` epochs; the last epoch holds
    what remains (``last_epoch_steps`` <= ``steps_per_epoch``).

    Example (1,000 examples, batch 32, 3 epochs: int(93.75) = 93 steps; 10
    steps in epochs of at most 4: 3 epochs of 4, 4 and 2; --train_step / --warmup_step instead of epochs):
    >>> o = FinetuneOptions("csv", "d", "o", num_train_epochs=3, train_batch_size=32)
    >>> training_schedule(1000, o)
    {'total_steps': 93, 'warmup_steps': 9, 'epochs': 3, 'steps_per_epoch': 31, 'last_epoch_steps': 31}
    >>> o = FinetuneOptions("csv", "d", "o", num_train_epochs=1, train_batch_size=1, steps_per_epoch=4)
    >>> training_schedule(10, o)
    {'total_steps': 10, 'warmup_steps': 1, 'epochs': 3, 'steps_per_epoch': 4, 'last_epoch_steps': 2}
    >>> o = FinetuneOptions("csv", "d", "o", train_batch_size=32, train_step=800, warmup_step=200)
    >>> training_schedule(1000, o)
    {'total_steps': 800, 'warmup_steps': 200, 'epochs': 25, 'steps_per_epoch': 32, 'last_epoch_steps': 32}
    """
    if num_examples <= 0:
        raise ValueError(f"The training split of --data_dir={options.data_dir!r} has no examples.")
    total = options.train_step or max(1, int(num_examples / options.train_batch_size * options.num_train_epochs))
    per_epoch = options.steps_per_epoch or max(1, math.ceil(num_examples / options.train_batch_size))
    epochs = max(1, math.ceil(total / per_epoch))
    per_epoch = math.ceil(total / epochs)
    warmup = options.warmup_step if options.warmup_step is not None else int(total * options.warmup_proportion)
    return {"total_steps": total, "warmup_steps": warmup,
            "epochs": epochs, "steps_per_epoch": per_epoch, "last_epoch_steps": total - (epochs - 1) * per_epoch}


def fit_segments(done: int, schedule: Dict[str, int]) -> List[Dict[str, int]]:
    """The `model.fit` calls that train steps `done`..total in the schedule's Keras epochs.

    One call covers a run of whole epochs of equal length; a resumed partial
    epoch and a shorter last epoch get their own call. Each dict holds
    initial_epoch, epochs (the fit argument: the epoch to stop before),
    steps_per_epoch and start (the batch the call's dataset starts at).

    Example (10 steps in epochs of 4, resumed after step 5):
    >>> s = {"total_steps": 10, "steps_per_epoch": 4}
    >>> [tuple(c.values()) for c in fit_segments(5, s)]
    [(1, 2, 3, 5), (2, 3, 2, 8)]
    >>> [tuple(c.values()) for c in fit_segments(0, s)]
    [(0, 2, 4, 0), (2, 3, 2, 8)]
    """
    total, per_epoch = schedule["total_steps"], schedule["steps_per_epoch"]
    calls, step = [], done
    while step < total:
        epoch = step // per_epoch
        if step % per_epoch == 0 and total - step >= per_epoch:
            count = (total - step) // per_epoch
            calls.append({"initial_epoch": epoch, "epochs": epoch + count, "steps_per_epoch": per_epoch,
                          "start": step})
            step += count * per_epoch
        else:
            end = min((epoch + 1) * per_epoch, total)
            calls.append({"initial_epoch": epoch, "epochs": epoch + 1, "steps_per_epoch": end - step,
                          "start": step})
            step = end
    return calls


def _make_optimizer(options: FinetuneOptions, schedule: Dict[str, int], model):
    """AdamW (bias-corrected, or the original's for adamw_original) with the original's exclusions,
    linear warmup then linear decay."""
    from albert_tf import optimizers

    return optimizers.adamw(options.learning_rate, num_train_steps=schedule["total_steps"],
                            bias_correction=options.optimizer != "adamw_original",
                            epsilon=options.adam_epsilon,
                            num_warmup_steps=schedule["warmup_steps"],
                            weight_decay_rate=options.weight_decay_rate,
                            layerwise_lr_decay=options.layerwise_lr_decay,
                            model=model if options.layerwise_lr_decay is not None else None)


def compile_task_model(model, task: FinetuneTask, options: FinetuneOptions, schedule: Dict[str, int]):
    """The runner's `model.compile`: the task's loss and metrics, AdamW with its schedule, and XLA
    for the whole train step with `options.jit_compile` (the text layer then runs in the input
    pipeline: `training_batches`). Call it inside the strategy's scope.

    Raises:
        ValueError: when Keras would silently drop XLA.
    """
    from albert_tf.tasks import static_shapes

    with static_shapes.text_layer_in_pipeline(model):
        model.compile(optimizer=_make_optimizer(options, schedule, model), loss=task.loss(),
                      metrics=task.compile_metrics(), jit_compile=bool(options.jit_compile))
    if bool(model.jit_compile) != bool(options.jit_compile):
        raise ValueError(f"--jit_compile: Keras cannot XLA-compile {type(model).__name__}.")
    return model


def training_batches(task: FinetuneTask, model, train_data, options: FinetuneOptions, start_batch: int = 0):
    """What `model.fit` trains on: the task's batches from `start_batch` on; under static shapes or
    XLA as ids made in the input pipeline, with static shapes of exactly train_batch_size rows and
    lengths from `static_shapes.static_lengths`."""
    from albert_tf.tasks import static_shapes

    t = options.task_options
    dataset = task.train_dataset(train_data, options.train_batch_size, options.seed, start_batch=start_batch)
    if t.static_shapes:
        return static_shapes.model_input_batches(
            dataset, model, static_shapes.static_lengths(t.max_seq_length, t.static_length_step),
            options.train_batch_size)
    if options.jit_compile:
        return static_shapes.model_input_batches(dataset, model)
    return dataset


def _check_static_batches(task: FinetuneTask, options: FinetuneOptions, replicas: int, train_data) -> None:
    """Static shapes split every batch evenly over the replicas and drop each pass's remainder."""
    if not options.task_options.static_shapes:
        return
    for name in ("train_batch_size", "eval_batch_size"):
        if getattr(options, name) % replicas:
            raise ValueError(f"--static_shapes: --{name}={getattr(options, name)} is not a multiple of the "
                             f"{replicas} replicas.")
    items = task.num_train_items(train_data)
    if items < options.train_batch_size:
        raise ValueError(f"--static_shapes drops each pass's remainder: the {items} training items make no full "
                         f"batch of --train_batch_size={options.train_batch_size}.")


def _check_jit_strategy(options: FinetuneOptions, strategy) -> None:
    """--jit_compile runs on one device or under TPUStrategy (`training.step.whole_step_xla_supported`)."""
    from albert_tf.training.step import whole_step_xla_supported

    if options.jit_compile and not whole_step_xla_supported(strategy):
        raise ValueError(
            f"--jit_compile with --strategy={options.strategy} ({strategy.num_replicas_in_sync} replicas): Keras "
            "cannot XLA-compile a train step under MirroredStrategy (on CPU devices the program reads other "
            "devices' variables; on GPUs the optimizer's step counter needs merge_call, keras-team/keras#17187); "
            "use one device or --strategy=tpu.")


def write_eval_results(path: str, results: Dict[str, Any]) -> None:
    """``key = value`` lines, sorted (the original's eval_results.txt)."""
    from pipelines.fileio import atomic_write

    with atomic_write(path, "w") as f:
        for key in sorted(results):
            f.write(f"{key} = {results[key]}\n")


def read_eval_results(path: str) -> Dict[str, float]:
    """Parses eval_results.txt back into floats (non-numbers stay strings)."""
    from pipelines.fileio import read_text

    results: Dict[str, Any] = {}
    for line in read_text(path).splitlines():
        if " = " in line:
            key, value = line.split(" = ", 1)
            try:
                results[key] = float(value)
            except ValueError:
                results[key] = value
    return results


def _model_config(options: FinetuneOptions):
    from albert_tf.config import AlbertConfig

    if options.config is not None:
        return options.config
    if options.albert_config_file:
        import tensorflow as tf

        if not tf.io.gfile.exists(options.albert_config_file):
            raise FileNotFoundError(f"--albert_config_file={options.albert_config_file!r} does not exist.")
        return AlbertConfig.from_json_file(options.albert_config_file)
    return None


def resolve_max_seq_length(options: FinetuneOptions, saved_model=None) -> int:
    """--max_seq_length, or the model's length when it is not given (None), checked against the model's positions.

    The rule of `albert_tf.config.max_seq_length_for` (also from_pretrained's and albert-export's): not
    given, 128 capped at max_position_embeddings (the demo's model: 64); an evaluation-only run takes
    the saved model's own length. A larger value than the model's positions is refused in one line
    here, never by a TensorFlow assertion in the first step.

    Args:
        options: the run's options (`task_options.max_seq_length` None: not given).
        saved_model: the task model an evaluation-only run loaded from output_dir; None when training.

    Raises:
        ValueError: the length exceeds the model's max_position_embeddings (naming the flag and both numbers).
    """
    from albert_tf import model_folder
    from albert_tf.config import max_seq_length_for

    requested = options.task_options.max_seq_length
    if saved_model is not None:
        positions = saved_model.config.max_position_embeddings
        if requested is None:
            requested = saved_model.task_config.get("max_seq_length")
    else:
        config = _model_config(options) or model_folder.model_config(options.init_checkpoint)
        positions = config.max_position_embeddings
    length = max_seq_length_for(positions, requested, "--max_seq_length")
    if options.task_options.max_seq_length is None:
        logging.info("--max_seq_length not given: %d (%s, the model has %d positions).", length,
                     "the saved model's" if saved_model is not None and requested is not None
                     else "128 capped at the model's positions", positions)
    return length


def resolve_size_defaults(options: FinetuneOptions) -> Dict[str, Any]:
    """The settings the user did not give, for the size of the model to train (`albert_tf.finetune_defaults`):
    a small model gets flags/recipes/small_finetune.cfg's values (one log line); returns those changed."""
    from albert_tf import model_folder
    from albert_tf.finetune_defaults import apply_size_defaults

    return apply_size_defaults(options, _model_config(options) or model_folder.model_config(options.init_checkpoint))


# ------------------------------------------------------------------ stages
def _train(task, options, strategy, train_data, dev_data, spm_model_file, precision) -> Any:
    import albert_tf
    from albert_tf.preemption import PreemptionWatcher
    from albert_tf.tasks import callbacks as cb
    from albert_tf.tasks.preemption import StopOnPreemption

    schedule = training_schedule(task.num_examples(train_data), options)
    _check_static_batches(task, options, strategy.num_replicas_in_sync, train_data)
    per_pass = task.batches_per_pass(train_data, options.train_batch_size)
    settings = run_settings(options, task, schedule, precision)
    _check_run_state(options, settings, record=False)  # recorded once the first step is done (below)
    logging.info("Training %s on %d examples (%d batches a pass): %d steps (%d epoch(s) of %d, the last %d), "
                 "%d warmup, batch %d, %d replica(s).", task.name, task.num_examples(train_data), per_pass,
                 schedule["total_steps"], schedule["epochs"], schedule["steps_per_epoch"],
                 schedule["last_epoch_steps"], schedule["warmup_steps"], options.train_batch_size,
                 strategy.num_replicas_in_sync)
    with strategy.scope():
        model = task.build_model(_model_config(options), options.init_checkpoint, train_data)
        compile_task_model(model, task, options, schedule)
        cb.build_optimizer(model)  # on every trainable variable, as a resume does (one slot list)
        resume = cb.ResumeCheckpoint(options.output_dir, model, per_pass, options.save_checkpoints_steps)
        done = resume.restore()

    def save(m):
        albert_tf.save_task_model(m, options.output_dir, spm_model_file=spm_model_file)

    summaries = cb.ScalarSummaries(options.output_dir, options.log_steps)
    callbacks = [cb.StopOnNonFinite(resume),  # first: a non-finite step saves nothing
                 cb.RecordRunSettings(lambda: record_run_state(options, settings)),  # before any save
                 cb.ProgressLogger(schedule["total_steps"], options.train_batch_size, options.log_steps), summaries]
    if dev_data is not None:
        callbacks.append(cb.BestOnDev(lambda m: task.evaluate(m, dev_data, options.eval_batch_size),
                                      task.selection_metric, save, options.output_dir, summaries,
                                      on_improvement=lambda results: task.record_selection(
                                          results, options.output_dir)))
    callbacks.append(resume)  # after BestOnDev: an epoch counts as done once its best model is saved
    calls = fit_segments(done, schedule)
    if not calls:
        logging.info("Training already finished (%d steps) in %s.", done, options.output_dir)
    started = time.time()
    # SIGTERM / SIGINT: save the resume state at the step and raise Preempted (albert_tf/tasks/preemption.py).
    with PreemptionWatcher(strategy) as watcher:
        callbacks.append(StopOnPreemption(watcher, resume))  # last: after the resume bookkeeping
        for call in calls:  # each starts its data where the previous one (or the interrupted run) stopped
            dataset = training_batches(task, model, train_data, options, start_batch=call["start"])
            model.fit(dataset, epochs=call["epochs"], steps_per_epoch=call["steps_per_epoch"],
                      initial_epoch=call["initial_epoch"], callbacks=callbacks, verbose=0, shuffle=False)
    if calls:
        logging.info("Training took %.1f s.", time.time() - started)
    if dev_data is None:
        save(model)  # no dev split to choose by: the last weights
        return model
    return _for_inference(albert_tf.load_task_model(options.output_dir), options)  # the best on dev


def _for_inference(model, options: FinetuneOptions):
    """A loaded model's predictions XLA-compiled too with --jit_compile."""
    from albert_tf.tasks import static_shapes

    return static_shapes.compile_for_xla(model) if options.jit_compile else model


def run_finetuning(options: FinetuneOptions, task: Optional[FinetuneTask] = None) -> Dict[str, Any]:
    """Trains, evaluates and/or predicts as `options` says.

    Args:
        options: `FinetuneOptions`.
        task: a ready `FinetuneTask` (default: `get_task(options.task, ...)`).

    Returns:
        dict with "model" (the fine-tuned Keras model), "eval_results" (dict,
        with --do_eval), "prediction_files" (with --do_predict).

    Example:
    >>> result = run_finetuning(FinetuneOptions(                              # doctest: +SKIP
    ...     task="glue/sst-2", data_dir="glue/SST-2", output_dir="runs/sst2",
    ...     init_checkpoint="runs/base", do_train=True, do_eval=True))
    >>> result["eval_results"]["accuracy"]                                    # doctest: +SKIP
    0.912
    """
    import keras
    import tensorflow as tf

    from albert_tf import runtime
    from albert_tf.tasks import evaluation_only
    from albert_tf.tasks.registry import get_task

    options.validate()
    model_dir = evaluation_only.model_folder(options)  # None when training: albert_tf/tasks/evaluation_only.py
    tf.io.gfile.makedirs(options.output_dir)
    task_options = options.task_options
    task_options.spm_model_file = find_spm_model(options)
    if options.do_train:  # an evaluation-only run takes the saved model's, once loaded
        task_options.max_seq_length = resolve_max_seq_length(options)
    task = task or get_task(options.task, task_options)
    if options.do_train:
        resolve_size_defaults(options)
    # Seed before building any tokenizer (tf-keras-notes: seeding afterwards
    # invalidates SentencePiece kernels).
    keras.utils.set_random_seed(options.seed)
    if options.strategy == "tpu" and not task_options.static_shapes:
        logging.info("--strategy=tpu: fixed input shapes (--static_shapes).")
        task_options.static_shapes = True
    precision = runtime.resolve_mixed_precision(options.mixed_precision)
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(runtime.dtype_policy_name(precision))
    try:
        strategy = runtime.get_strategy(options.strategy, tpu=options.tpu, num_gpus=options.num_gpus)
        logging.info("Task %s, %s, strategy %s (%d replica(s)).", task.name, precision, options.strategy,
                     strategy.num_replicas_in_sync)
        _check_jit_strategy(options, strategy)
        model = None
        if model_dir is not None:  # evaluate/predict a fine-tuned model: --init_checkpoint's or output_dir's
            model = evaluation_only.load_model(model_dir, options, strategy)
            task_options.max_seq_length = resolve_max_seq_length(options, saved_model=model)
            task.adopt_saved_model(model.task_config)
        train_data = task.read(options.data_dir, "train") if options.do_train else None
        dev_data = task.read(options.data_dir, "dev") if (options.do_eval or options.do_train) else None
        if options.do_eval and dev_data is None:
            raise FileNotFoundError(f"--do_eval: no dev split in --data_dir={options.data_dir!r}.")
        test_data = None
        if options.do_predict:
            test_data = task.read(options.data_dir, "test")
            if test_data is None:
                logging.info("No test split in %s: predicting the dev split.", options.data_dir)
                test_data = dev_data if dev_data is not None else task.read(options.data_dir, "dev")
                if test_data is None:
                    raise FileNotFoundError(f"--do_predict: no test or dev split in --data_dir={options.data_dir!r}.")
        if options.do_train:
            model = _train(task, options, strategy, train_data, dev_data, task_options.spm_model_file,
                           precision)
        result: Dict[str, Any] = {"model": model, "task": task}
        if options.do_eval:
            results = task.evaluate(model, dev_data, options.eval_batch_size)
            write_eval_results(os.path.join(options.output_dir, EVAL_RESULTS_FILE), results)
            logging.info("Dev results (%s): %s", EVAL_RESULTS_FILE,
                         ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
            result["eval_results"] = results
        if options.do_predict:
            files = task.predict(model, test_data, options.eval_batch_size, options.output_dir)
            logging.info("Predictions written: %s", ", ".join(files))
            result["prediction_files"] = files
        return result
    finally:
        keras.config.set_dtype_policy(previous_policy)
