"""absl flag groups shared by the albert-tf binaries.

A binary defines the groups it needs before parsing, e.g. in its `run()`
(not at import, so that test processes can import several binaries):

```python
from absl import app, flags
import flags.core_flags as albert_flags  # not `flags`: keep absl's name free

def run():
    albert_flags.define_model_flags()
    albert_flags.define_optimization_flags()
    app.run(main)
```

Every group function may be called more than once.

Defaults are the original run_pretraining.py defaults (reference §1); the
paper's recipes live in `flags/recipes/*.cfg` (use with `--flagfile=`).
"""

from __future__ import annotations

from absl import flags

# The same tuples as albert_tf.runtime's (not imported from there: binaries
# import this module before TensorFlow, so that its log settings apply).
MIXED_PRECISION_CHOICES = ("auto", "float32", "bfloat16", "float16")
STRATEGY_CHOICES = ("default", "mirrored", "multi_worker_mirrored", "tpu")


def _define(define_fn, name: str, *args, **kwargs) -> None:
    """Defines a flag unless this process already has one of that name.

    Groups are shared by binaries and a test process may import several of
    them; a flag is defined once (its first definition wins).
    """
    if name not in flags.FLAGS:
        define_fn(name, *args, **kwargs)


def define_model_flags() -> None:
    """--preset, --albert_config_file, --init_checkpoint, --spm_model_file."""
    _define(flags.DEFINE_string, "preset", None,
            "A released configuration, e.g. albert_base_v2 (see "
            "AlbertConfig.presets()). Exclusive with --albert_config_file.")
    _define(flags.DEFINE_string, "albert_config_file", None,
            "albert_config.json describing the model (the original's format).")
    _define(flags.DEFINE_string, "init_checkpoint", None,
            "Warm-start weights: a released google-research folder or an original "
            "TF1 checkpoint prefix, a Hugging Face folder, an albert-tf folder or "
            "training checkpoint (albert_tf/model_folder.py says which file of a "
            "folder is read). albert-finetune without --do_train: the fine-tuned "
            "model to evaluate or predict with (read only).")
    _define(flags.DEFINE_string, "spm_model_file", None,
            "SentencePiece model of the vocabulary; copied next to the trained "
            "model so that export and fine-tuning find it. Default (fine-tuning): "
            "spm.model, 30k-clean.model, spiece.model or the only *.model file "
            "beside --init_checkpoint, else in --output_dir.")


def define_vocabulary_check_flags() -> None:
    """--allow_other_vocabulary (albert-pretrain, albert-finetune: albert_tf/vocabulary_check.py)."""
    _define(flags.DEFINE_bool, "allow_other_vocabulary", False,
            "Use a --spm_model_file other than the vocabulary the shards' manifest "
            "records (albert-pretrain) or the one beside --init_checkpoint "
            "(albert-finetune), with a WARNING; without it such a file is refused "
            "in one line naming both.")


def define_pretraining_data_flags() -> None:
    """Input flags of albert-pretrain (the original's names and defaults)."""
    _define(flags.DEFINE_string, "input_file", None,
            "TFRecord shards of pretraining examples: a glob or a "
            "comma-separated list of globs.")
    _define(flags.DEFINE_string, "eval_input_file", None,
            "TFRecord shards for --do_eval (default: --input_file).")
    _define(flags.DEFINE_integer, "max_seq_length", 512,
            "Sequence length the shards were written with.")
    _define(flags.DEFINE_integer, "max_predictions_per_seq", 20,
            "Masked positions per sequence in the shards.")
    _define(flags.DEFINE_enum, "masking", "static",
            ["static", "dynamic"],
            "static: the masks stored in the shards; dynamic: fresh n-gram "
            "masks drawn in the input pipeline every epoch.")
    _define(flags.DEFINE_float, "masked_lm_prob", 0.15,
            "With --masking=dynamic: the fraction of tokens masked; above the "
            "shards' rate each row gets more masked positions (0.4 at length "
            "128: 51; see flags/recipes/small_pretrain.cfg).")
    _define(flags.DEFINE_string, "data_service_address", None,
            "grpc://HOST:PORT of a tf.data service dispatcher (started with "
            "albert-data-service): reading, parsing and masking of the "
            "training data run on its workers. Order is then not "
            "deterministic, so a resumed run does not see exactly the data "
            "of an uninterrupted one.")
    _define(flags.DEFINE_enum, "verify_shards", "size", ["none", "size", "full"],
            "Before the first step, check the input shards against the "
            "PREFIX.manifest.json albert-create-pretraining-data wrote beside "
            "them: size (a stat per file, and no shard of the set missing), "
            "full (also the SHA-256 of every file: reads all the data once) or "
            "none. Every bad or missing shard is named; shards without a "
            "manifest are read unverified.")
    _define(flags.DEFINE_bool, "skip_corrupt_records", False,
            "A record that fails its CRC or is truncated ends the reading of "
            "its file instead of stopping the run (tf.data cannot resync "
            "inside a TFRecord file); shards that fail --verify_shards are "
            "then read anyway, with a warning naming them.")
    _define(flags.DEFINE_bool, "do_train", True,
            "Run training.")
    _define(flags.DEFINE_bool, "do_eval", False,
            "Evaluate after training; writes eval_results.txt.")
    _define(flags.DEFINE_integer, "eval_batch_size", 64,
            "Global evaluation batch size.")
    _define(flags.DEFINE_integer, "max_eval_steps", 100,
            "Evaluation batches at most.")


def define_optimization_flags() -> None:
    """Optimizer, schedule, batch and accumulation flags."""
    _define(flags.DEFINE_enum, "optimizer", "lamb",
            ["lamb", "adamw"],
            "The original LAMB or AdamW (no bias correction).")
    _define(flags.DEFINE_float, "learning_rate", 0.00176,
            "Peak learning rate.")
    _define(flags.DEFINE_integer, "train_batch_size", 4096,
            "Global batch: per-replica batch x replicas x "
            "gradient_accumulation_steps.")
    _define(flags.DEFINE_integer, "num_train_steps", 125000,
            "Optimizer steps.")
    _define(flags.DEFINE_integer, "num_warmup_steps", 3125,
            "Linear warmup steps.")
    _define(flags.DEFINE_integer, "start_warmup_step", 0,
            "Step warmup counts from.")
    _define(flags.DEFINE_float, "poly_power", 1.0,
            "Power of the polynomial decay.")
    _define(flags.DEFINE_float, "weight_decay_rate", 0.01,
            "Decoupled weight decay (not on LayerNorm or biases).")
    _define(flags.DEFINE_float, "clip_norm", 1.0,
            "Global-norm gradient clipping; 0 disables it.")
    _define(flags.DEFINE_integer, "gradient_accumulation_steps", 1,
            "Micro-batches per optimizer step, so that a large "
            "--train_batch_size fits in memory. Exactly one big batch.")


def define_distribution_flags() -> None:
    """--strategy, --tpu, --num_gpus."""
    _define(flags.DEFINE_enum, "strategy", "default",
            list(STRATEGY_CHOICES),
            "tf.distribute strategy. multi_worker_mirrored reads TF_CONFIG.")
    _define(flags.DEFINE_string, "tpu", None,
            "TPU name or grpc:// address for --strategy=tpu.")
    _define(flags.DEFINE_integer, "num_gpus", None,
            "GPUs for --strategy=mirrored (default: all; with no GPU, all "
            "logical CPU devices).")


def define_cpu_devices_flag() -> None:
    """--num_cpu_devices (albert-pretrain only: the other binaries do not read it)."""
    _define(flags.DEFINE_integer, "num_cpu_devices", None,
            "With --strategy=mirrored on a machine without a GPU: split the "
            "CPU into this many logical devices, one replica each (checks a "
            "multi-replica run on a CPU, e.g. bench/studies/device_check.sh).")


def define_runtime_flags() -> None:
    """Output, precision, XLA, checkpoint, logging and seed flags."""
    _define(flags.DEFINE_string, "output_dir", None,
            "Checkpoints, summaries, config and results go here.")
    _define(flags.DEFINE_enum, "mixed_precision", "auto",
            list(MIXED_PRECISION_CHOICES),
            "Compute dtype; variables stay float32. auto: on GPUs bfloat16 "
            "from compute capability 8.0 (Ampere), float16 on 7.x (Volta, "
            "Turing), float32 below; on a CPU bfloat16 with AMX or AVX-512 "
            "bfloat16 units, else float32. float16 adds dynamic loss scaling.")
    _define(flags.DEFINE_bool, "jit_compile", False,
            "Compile the forward and backward pass with XLA.")
    _define(flags.DEFINE_bool, "jit_whole_step", False,
            "Compile the whole replica step with XLA as one program: forward, "
            "backward, gradient accumulation, loss scaling, the non-finite "
            "guard, the all-reduce and the optimizer update, as TPUStrategy "
            "does (a CPU run with it checks that a TPU can compile the step).")
    _define(flags.DEFINE_integer, "save_checkpoints_steps", 5000,
            "Checkpoint every N steps.")
    _define(flags.DEFINE_integer, "keep_checkpoint_max", 5,
            "Checkpoints kept (older ones are deleted).")
    _define(flags.DEFINE_integer, "log_steps", 100,
            "Log and write summaries every N steps.")
    _define(flags.DEFINE_integer, "seed", 12345,
            "Seed of weight initialisation, dropout and data order.")


def define_on_nonfinite_flag() -> None:
    """--on_nonfinite (albert-pretrain; albert-finetune takes stop only)."""
    _define(flags.DEFINE_enum, "on_nonfinite", "stop", ["stop", "rollback"],
            "stop: a NaN/inf loss ends the run in one line naming the last good "
            "checkpoint (albert-finetune: its resume checkpoint; stop is its only "
            "choice). rollback (albert-pretrain): a NaN/inf loss or a loss spike (see "
            "--loss_spike_factor) restores the last checkpoint, skips the input "
            "batches read since (a resumed run skips the same ones), optionally "
            "lowers the learning rate, logs one line and goes on; after "
            "--max_rollbacks rollbacks the next event ends the run. Checkpoint "
            "often enough (--save_checkpoints_steps): a rollback redoes up to that "
            "many steps.")


def define_recovery_flags() -> None:
    """What albert-pretrain does when the loss diverges (albert_tf/training/healing.py)."""
    define_on_nonfinite_flag()
    _define(flags.DEFINE_float, "loss_spike_factor", 2.0,
            "With --on_nonfinite=rollback: a step loss above this many times the "
            "median of the last --loss_spike_window step losses is a spike "
            "(0: only NaN/inf).")
    _define(flags.DEFINE_integer, "loss_spike_window", 100,
            "Step losses the spike median is taken over (at most 1000); spikes are "
            "looked for once that many steps have been seen.")
    _define(flags.DEFINE_float, "rollback_learning_rate_factor", 1.0,
            "With --on_nonfinite=rollback: each rollback multiplies the learning "
            "rate by this, e.g. 0.5 (1: the schedule is kept).")
    _define(flags.DEFINE_integer, "max_rollbacks", 3,
            "With --on_nonfinite=rollback: rollbacks allowed; the next divergence "
            "ends the run in one line.")


def define_static_shape_flags() -> None:
    """--static_shapes, --static_length_step (albert-pretrain and albert-finetune)."""
    _define(flags.DEFINE_bool, "static_shapes", False,
            "Fixed input shapes, as a TPU needs (on by itself with "
            "--strategy=tpu): training batches of exactly the batch size (each "
            "pass drops its remainder), evaluation's last batch filled with "
            "padding rows that count for nothing, fine-tuning lengths padded "
            "to the next multiple of --static_length_step (or "
            "--max_seq_length), so XLA compiles a bounded number of programs.")
    _define(flags.DEFINE_integer, "static_length_step", 64,
            "With --static_shapes: fine-tuning batches are padded to a "
            "multiple of this length (at most --max_seq_length).")


def define_vocab_size_flag() -> None:
    """--vocab_size (albert-pretrain)."""
    _define(flags.DEFINE_integer, "vocab_size", None,
            "The model's vocab_size instead of the --preset's or --albert_config_file's: the "
            "piece count of --spm_model_file (albert-create-vocab logs it), e.g. when the text "
            "makes fewer pieces than the config has. Default: the config's.")


def define_warm_start_flags() -> None:
    """--allow_partial_init_checkpoint (albert-pretrain)."""
    _define(flags.DEFINE_bool, "allow_partial_init_checkpoint", False,
            "Warm-start from an --init_checkpoint of another shape (another size or "
            "vocabulary), loading only the variables whose name and shape match; "
            "logs what was loaded and what was not. Without it such a checkpoint "
            "is refused in one line naming the first variable that differs.")


def define_all_pretraining_flags() -> None:
    """Every group albert-pretrain uses."""
    define_model_flags()
    define_vocabulary_check_flags()
    define_vocab_size_flag()
    define_warm_start_flags()
    define_pretraining_data_flags()
    define_optimization_flags()
    define_distribution_flags()
    define_cpu_devices_flag()
    define_runtime_flags()
    define_recovery_flags()
    define_static_shape_flags()



def pretraining_configs(flag_values=None):
    """The (OptimizationConfig, RuntimeConfig, PretrainingDataConfig) the
    parsed flags describe: each field reads the flag of its name.

    Args:
        flag_values: parsed flags (default `absl.flags.FLAGS`).
    """
    from albert_tf.training import configs  # imports TensorFlow: call in main

    flag_values = flag_values or flags.FLAGS
    return (configs.OptimizationConfig.from_flags(flag_values),
            configs.RuntimeConfig.from_flags(flag_values),
            configs.PretrainingDataConfig.from_flags(flag_values))
