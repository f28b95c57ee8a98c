"""What a training run saves and restores: the train state and its checkpoints.

`TrainState` holds the model, optimizer, schedule, global step, dropout RNG
state and (float16) loss scale, with the `tf.train.Checkpoint` and manager
that save them; `restore_or_warm_start` resumes from output_dir or copies
weights from --init_checkpoint; `check_run_settings` refuses to resume a
checkpoint under settings that change what its step count means.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, Optional

import keras
import tensorflow as tf
from absl import logging

from albert_tf import runtime
from albert_tf.checkpoints import CONFIG_FILENAME
from albert_tf.config import AlbertConfig
from albert_tf.models.pretrainer import AlbertPretrainer
from albert_tf.training.common import (
    CHECKPOINT_NAME,
    RUN_SETTINGS_FILENAME,
    TrainingError,
)
from albert_tf.training.configs import OptimizationConfig
from albert_tf.training.healing import RecoveryState, ScaledSchedule
from pipelines.fileio import atomic_write


@dataclasses.dataclass
class LossScale:
    """Dynamic loss scaling for float16 (per replica, kept identical)."""

    scale: tf.Variable
    good_steps: tf.Variable
    period: int = 2000

    @classmethod
    def create(cls, initial: float = 2.0 ** 15) -> "LossScale":
        kw = dict(trainable=False,
                  synchronization=tf.VariableSynchronization.ON_READ,
                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        return cls(tf.Variable(initial, dtype=tf.float32, name="loss_scale",
                               **kw),
                   tf.Variable(0, dtype=tf.int64, name="good_steps", **kw))

    def update(self, finite: tf.Tensor) -> None:
        """Halves the scale on overflow; doubles it after `period` good steps."""
        grow = tf.logical_and(finite, self.good_steps + 1 >= self.period)
        new_scale = tf.where(
            finite, tf.where(grow, self.scale * 2.0, self.scale),
            tf.maximum(self.scale / 2.0, 1.0))
        new_good = tf.where(tf.logical_and(finite, tf.logical_not(grow)),
                            self.good_steps + 1, tf.zeros_like(self.good_steps))
        self.scale.assign(new_scale)
        self.good_steps.assign(new_good)


@dataclasses.dataclass
class TrainState:
    """Everything a step changes, and the checkpoint that saves it."""

    model: AlbertPretrainer
    optimizer: keras.optimizers.Optimizer
    schedule: Any
    global_step: tf.Variable
    loss_scale: Optional[LossScale]
    checkpoint: tf.train.Checkpoint
    manager: tf.train.CheckpointManager
    # What rollbacks changed (`healing.RecoveryState`), saved in every
    # checkpoint; `legacy_checkpoint` reads checkpoints written without it.
    recovery: RecoveryState
    legacy_checkpoint: tf.train.Checkpoint
    # What `restore` reads: `checkpoint` without the input position, which
    # `attach_input` adds to what is saved (a rollback keeps the input going).
    restorable: tf.train.Checkpoint

    @property
    def step(self) -> int:
        return int(self.global_step.numpy())

    def restore(self, path: str) -> None:
        """Restores everything `path` holds (a checkpoint of a version without
        the recovery state leaves it at its start: nothing skipped)."""
        from albert_tf.checkpoints import checkpoint_variable_names

        names = checkpoint_variable_names(path)
        if any(name.startswith("recovery/") for name in names):
            status = self.restorable.restore(path)
            status.assert_existing_objects_matched()
            status.expect_partial()  # the input position: `train_input` restores it
            # The saves counted in the folder (what restoring `checkpoint` gave).
            self.checkpoint.save_counter.assign(self.restorable.save_counter)
        else:
            self.legacy_checkpoint.restore(path).assert_existing_objects_matched()

    def attach_input(self, iterator) -> None:
        """Saves `iterator`'s state (the data position) in every checkpoint
        from now on, as "input" (`train_input`); `restore` leaves it alone."""
        from albert_tf.training.train_input import CHECKPOINT_KEY

        setattr(self.checkpoint, CHECKPOINT_KEY, iterator)

    @classmethod
    def create(cls, config: AlbertConfig, optimization: OptimizationConfig,
               precision: str, strategy: tf.distribute.Strategy,
               checkpoint_dir: str, keep_checkpoint_max: int) -> "TrainState":
        """Builds model and optimizer in `strategy.scope()`.

        Args:
            config: the model config.
            optimization: optimizer and schedule settings.
            precision: a resolved precision ("float32", "bfloat16", "float16").
            strategy: the strategy the variables live in.
            checkpoint_dir: where the manager saves (a scratch folder on
                non-chief workers).
            keep_checkpoint_max: checkpoints kept.
        """
        with strategy.scope():
            model = AlbertPretrainer(
                config, dtype=runtime.dtype_policy_name(precision))
            recovery = RecoveryState()
            # A rollback may lower the rate (scale 1.0 changes nothing).
            schedule = ScaledSchedule(optimization.create_schedule(), recovery.lr_scale)
            opt = optimization.create_optimizer(schedule)
            opt.build(model.trainable_variables)
            global_step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            loss_scale = LossScale.create() if precision == "float16" else None
        # Dropout RNG states are Keras variables that tf.train.Checkpoint does
        # not reach through the model; track them so that a resumed run draws
        # the same dropout masks as an uninterrupted one.
        rng = tf.Module()
        rng.states = [v.value for v in model.non_trainable_variables
                      if "seed_generator" in v.path]
        tracked = dict(model=model, optimizer=opt, global_step=global_step,
                       rng=rng)
        if loss_scale is not None:
            tracked.update(loss_scale=loss_scale.scale,
                           good_steps=loss_scale.good_steps)
        legacy_checkpoint = tf.train.Checkpoint(**tracked)
        checkpoint = tf.train.Checkpoint(recovery=recovery, **tracked)
        restorable = tf.train.Checkpoint(recovery=recovery, **tracked)
        manager = tf.train.CheckpointManager(
            checkpoint, checkpoint_dir, max_to_keep=keep_checkpoint_max,
            checkpoint_name=CHECKPOINT_NAME)
        return cls(model, opt, schedule, global_step, loss_scale, checkpoint,
                   manager, recovery, legacy_checkpoint, restorable)


def restore_or_warm_start(state: TrainState, output_dir: str,
                          init_checkpoint: Optional[str],
                          config: AlbertConfig, allow_partial: bool = False) -> Optional[str]:
    """Resumes from output_dir's latest checkpoint (or, when it cannot be read, the newest one that
    can: `albert_tf.checkpoint_fallback`), else warm-starts.

    Args:
        allow_partial: let a warm start from a model of another shape load only
            the variables that match (`warm_start`).

    Returns:
        The checkpoint resumed from, or None for a fresh (or warm) start.
    """
    from albert_tf.checkpoint_fallback import UnreadableCheckpoints, restore_newest_readable

    try:  # a corrupt latest checkpoint: the previous one, with a WARNING naming it
        latest = restore_newest_readable(state.restore, output_dir)
    except UnreadableCheckpoints as e:
        raise TrainingError(str(e)) from e
    if latest:
        skipped = int(state.recovery.data_offset.numpy())
        logging.info("Resumed from step %d (%s)%s", state.step, latest,
                     f"; {skipped} input batch(es) skipped by rollbacks" if skipped else "")
    elif init_checkpoint:
        warm_start(state.model, init_checkpoint, config, allow_partial)
    return latest


PARTIAL_FLAG = "--allow_partial_init_checkpoint"


def _mismatch(var, src) -> Optional[str]:
    """Why `src` (a variable of the checkpoint's model, or None) cannot fill `var`; None when it can."""
    if src is None:
        return f"{var.path} {tuple(var.shape)} is not in it"
    if tuple(src.shape) != tuple(var.shape):
        return f"{var.path} has shape {tuple(src.shape)} there and {tuple(var.shape)} here"
    return None


def warm_start(pretrainer: AlbertPretrainer, path: str,
               config: AlbertConfig, allow_partial: bool = False) -> None:
    """Copies the weights of `path` into `pretrainer`: all of them, or (allow_partial) those that match.

    Args:
        pretrainer: the model to fill.
        path: anything `albert_tf.load_checkpoint` reads.
        config: the config to read `path` with when its folder has none.
        allow_partial: copy only the variables whose path and shape match and
            log at WARNING what was loaded and what was not.

    Raises:
        TrainingError: (one line) a variable of the model is missing from the
            checkpoint or has another shape there, naming the first one and
            both shapes (unless allow_partial); or nothing matches at all.
    """
    import albert_tf  # the package exports load_checkpoint; avoid a cycle

    try:
        source = albert_tf.load_checkpoint(path)
    except FileNotFoundError:
        source = albert_tf.load_checkpoint(path, config=config)
    values = {v.path: v for v in source.weights}
    loaded, skipped = [], []
    for var in pretrainer.weights:
        src = values.get(var.path)
        reason = _mismatch(var, src)
        if reason is None:
            loaded.append((var, src))
        elif var.trainable:
            if not allow_partial:
                raise TrainingError(
                    f"--init_checkpoint={path!r} is a model of another shape: {reason} (the first of the "
                    f"model's variables that does not match). Give a checkpoint of this model's config, or "
                    f"{PARTIAL_FLAG} to warm-start only the variables that match.")
            skipped.append(var.path)
    if not loaded:
        raise TrainingError(
            f"--init_checkpoint={path!r} shares no weight with this model.")
    for var, src in loaded:
        var.assign(src.numpy())
    if skipped:
        logging.warning("Partial warm start from %s (%s): %d of %d variables loaded (%s); %d kept fresh: %s",
                        path, PARTIAL_FLAG, len(loaded), len(loaded) + len(skipped),
                        ", ".join(var.path for var, _ in loaded), len(skipped), ", ".join(skipped))
    else:
        logging.info("Warm start from %s: all %d variables loaded.", path, len(loaded))


def check_or_write_config(config: AlbertConfig, output_dir: str,
                          chief: bool) -> None:
    """Refuses an output_dir that holds another model's run; records ours."""
    path = os.path.join(output_dir, CONFIG_FILENAME)
    if tf.io.gfile.exists(path):
        existing = AlbertConfig.from_json_file(path)
        if existing != config:
            ours, theirs = config.to_dict(), existing.to_dict()
            diff = ", ".join(
                f"{k}: {theirs.get(k)!r} there vs {ours.get(k)!r} now"
                for k in sorted(set(ours) | set(theirs))
                if ours.get(k) != theirs.get(k))
            raise TrainingError(
                f"output_dir {output_dir!r} holds a run of a different model "
                f"({diff}). Use a new --output_dir, or the same config to "
                "resume.")
        return
    if chief:
        with atomic_write(path) as f:
            f.write(config.to_json_string())


# Settings that fix what a checkpoint's step means (examples per step, the
# data position after N steps, the shape of the data): a resumed run must
# keep them. How to keep each one, for the error message.
_FIXED_SETTINGS = {
    "train_batch_size": "--train_batch_size={old}",
    "num_replicas": "{old} replica(s) (--strategy / --num_gpus)",
    "gradient_accumulation_steps": "--gradient_accumulation_steps={old}",
    "max_seq_length": "--max_seq_length={old}",
    "max_predictions_per_seq": "--max_predictions_per_seq={old}",
    # The shuffles and dynamic masks are drawn from the seed, and the step's
    # data position indexes the input files' records.
    "seed": "--seed={old}",
    "masking": "--masking={old}",
    "masked_lm_prob": "--masked_lm_prob={old}",
    "input_files": "--input_file matching the same files ({old})",
}


def input_files_fingerprint(input_file: Optional[str]) -> Optional[str]:
    """What --input_file matches, in a few words: the count and a digest of the sorted file names.

    Names without their folder, so that moving the shards elsewhere still resumes.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("b.tfrecord", "a.tfrecord"):
    ...     with atomic_write(os.path.join(folder, name)) as f:
    ...         _ = f.write("records")
    >>> input_files_fingerprint(os.path.join(folder, "*.tfrecord"))
    '2 files, names sha256 7c45b1431db3'
    >>> input_files_fingerprint(None) is None
    True
    """
    if not input_file:
        return None
    from pipelines.tokenizer import expand_input_patterns  # lazy: the data package is optional here

    names = sorted(os.path.basename(path) for path in expand_input_patterns(input_file))
    digest = hashlib.sha256("\n".join(names).encode("utf-8")).hexdigest()[:12]
    return f"{len(names)} files, names sha256 {digest}"


def run_settings(optimization: OptimizationConfig, num_replicas: int,
                 max_seq_length: Optional[int],
                 max_predictions_per_seq: Optional[int],
                 seed: Optional[int] = None, masking: Optional[str] = None,
                 masked_lm_prob: Optional[float] = None,
                 input_file: Optional[str] = None) -> Dict[str, Any]:
    """The settings recorded beside a run's checkpoints.

    Args:
        optimization: batch size, accumulation and schedule.
        num_replicas: replicas in sync.
        max_seq_length, max_predictions_per_seq: the data's shape, when known.
        seed: the run's seed (shuffles, dynamic masks, dropout).
        masking: "static" or "dynamic"; masked_lm_prob counts only when dynamic.
        input_file: --input_file (globs), recorded as `input_files_fingerprint`.
        None leaves a setting unchecked (a library caller's own dataset).
    """
    return {
        "train_batch_size": optimization.train_batch_size,
        "num_replicas": num_replicas,
        "gradient_accumulation_steps": optimization.gradient_accumulation_steps,
        "max_seq_length": max_seq_length,
        "max_predictions_per_seq": max_predictions_per_seq,
        "num_train_steps": optimization.num_train_steps,
        "seed": seed,
        "masking": masking,
        "masked_lm_prob": masked_lm_prob if masking == "dynamic" else None,
        "input_files": input_files_fingerprint(input_file),
    }


def check_run_settings(output_dir: str, settings: Dict[str, Any],
                       resumed_from: Optional[str], chief: bool) -> None:
    """Compares a resumed run's settings with its checkpoint's; records them.

    Args:
        output_dir: holds RUN_SETTINGS_FILENAME beside the checkpoints.
        settings: this run's `run_settings`.
        resumed_from: the checkpoint being resumed, or None (fresh start: the
            settings are only recorded).
        chief: whether this worker writes the file.

    Raises:
        TrainingError: a fixed setting differs, naming it, both values and
            how to proceed. A changed num_train_steps is allowed (training
            longer, as with the original) and logged as a schedule change.
    """
    path = os.path.join(output_dir, RUN_SETTINGS_FILENAME)
    if resumed_from and tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            recorded = json.load(f)
        for name, keep in _FIXED_SETTINGS.items():
            old, new = recorded.get(name), settings[name]
            if old is None or new is None or old == new:
                continue  # None: not known to one of the runs
            raise TrainingError(
                f"Cannot resume {resumed_from} with {name}={new}: it was "
                f"trained with {name}={old} (recorded in {path}), and a step "
                "would no longer mean the same examples. Resume with "
                f"{keep.format(old=old)}, or start a new --output_dir "
                "(--init_checkpoint=" + resumed_from + " warm-starts the "
                "weights there).")
        old_steps = recorded.get("num_train_steps")
        if old_steps is not None and old_steps != settings["num_train_steps"]:
            logging.warning(
                "The schedule changed: num_train_steps %d -> %d; the learning "
                "rate now decays over %d steps instead of %d.", old_steps,
                settings["num_train_steps"], settings["num_train_steps"],
                old_steps)
    elif resumed_from:
        logging.warning("%s has no %s (an older run): resuming unchecked.",
                        output_dir, RUN_SETTINGS_FILENAME)
    if chief:
        with atomic_write(path) as f:
            json.dump(settings, f, indent=2, sort_keys=True)
