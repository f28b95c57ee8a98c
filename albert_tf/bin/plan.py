r"""albert-plan: memory, largest micro-batch, FLOPs and step time of a pretraining setup.

    albert-plan --preset=albert_base_v2 --max_seq_length=512 \
        --train_batch_size=4096 --num_replicas=8 --device=h100

prints, per replica: the parameters (exact), the float32 weights, optimizer
state (LAMB/AdamW: two float32 slots) and gradients, the compute-dtype weight
copies and the activations of the micro-batch (train_batch_size / replicas /
gradient_accumulation_steps); whether that fits the device's memory less
--headroom; the largest micro-batch that fits and the smallest
--gradient_accumulation_steps that fits; the model FLOPs of one optimizer step
and its time at --peak_fraction of the device's published peak. The model
behind the figures: albert_tf/planning.py. A --preset plans without loading
TensorFlow; an --albert_config_file (local or gs://) is read through
tf.io.gfile, which loads it (a few seconds).
"""

from __future__ import annotations

import dataclasses
import os
import sys

from absl import app, flags

from albert_tf import planning

FLAGS = flags.FLAGS
DEVICE_NAMES = ("a100", "h100", "h200", "tpu-v4", "tpu-v5e", "cpu")


def _define_flags() -> None:
    from albert_tf import config

    flags.DEFINE_string("preset", "albert_base_v2",
                        f"A released configuration: {', '.join(sorted(config.AlbertConfig.presets()))}.")
    flags.DEFINE_string("albert_config_file", None, "albert_config.json to plan instead of --preset.")
    flags.DEFINE_enum("sharing", None, list(config.SHARING_MODES),
                      "Override the config's cross-layer sharing (default: the config's).")
    flags.DEFINE_integer("max_seq_length", 512, "Sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence (the MLM head's rows).")
    flags.DEFINE_integer("train_batch_size", 4096, "Global batch per optimizer step.")
    flags.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-steps per optimizer step.")
    flags.DEFINE_integer("num_replicas", 1, "Data-parallel replicas (one per chip).")
    flags.DEFINE_enum("mixed_precision", "auto", ["auto", "float32", "bfloat16", "float16"],
                      "Compute dtype; auto: bfloat16 (every listed device has bfloat16 matmul units).")
    flags.DEFINE_enum("optimizer", "lamb", sorted(planning.OPTIMIZER_SLOTS), "Optimizer (both keep 2 slots).")
    flags.DEFINE_enum("device", "h100", list(DEVICE_NAMES), "The chip to plan for (published peak and memory).")
    flags.DEFINE_float("peak_fraction", planning.DEFAULT_PEAK_FRACTION,
                       "Fraction of the peak matmul rate the step-time estimate assumes.")
    flags.DEFINE_float("headroom", planning.DEFAULT_HEADROOM,
                       "Fraction of device memory kept free (fragmentation, framework buffers).")
    flags.DEFINE_float("cpu_tflops", planning.DEFAULT_CPU_FLOPS / 1e12,
                       "With --device=cpu: the machine's measured matmul rate in TFLOP/s "
                       "(python -m bench.studies.matmul_primitives measures it).")
    flags.DEFINE_float("cpu_memory_gib", None, "With --device=cpu: memory in GiB (default: this machine's).")


def _config():
    from albert_tf.config import AlbertConfig

    if FLAGS.albert_config_file:
        # Through tf.io.gfile, as every reader of a config (a local path, gs:// and the rest alike); TensorFlow
        # loads with its start-up lines filtered, as in the other binaries.
        from albert_tf.bin.common import start_tensorflow_quietly

        start_tensorflow_quietly()
        config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    else:
        config = AlbertConfig.from_preset(FLAGS.preset)
    if FLAGS.sharing:
        config = dataclasses.replace(config, sharing=FLAGS.sharing)
    return config


def _device():
    if FLAGS.device != "cpu":
        return planning.DEVICES[FLAGS.device]
    if FLAGS.cpu_memory_gib is None:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    else:
        memory = FLAGS.cpu_memory_gib * planning.GIB
    # The messages name --device, so that run_binary does not put the flag
    # whose value "cpu" they quote in front.
    if not FLAGS.cpu_tflops > 0:
        raise ValueError(f"--cpu_tflops={FLAGS.cpu_tflops!r} must be positive (with --device=cpu).")
    if not memory > 0:
        raise ValueError(f"--cpu_memory_gib={FLAGS.cpu_memory_gib!r} must be positive (with --device=cpu).")
    return planning.cpu_device(FLAGS.cpu_tflops * 1e12, memory)


def _replicas(count: int) -> str:
    return f"{count} replica" + ("s" if count != 1 else "")


def _size(num_bytes: float) -> str:
    return f"{num_bytes / planning.GIB:,.2f} GiB"


def _flops(count: float) -> str:
    """PFLOP, or TFLOP below 0.01 PFLOP (a small model's step would read 0.000 PFLOP).

    >>> _flops(1.191e15), _flops(2.8e13), _flops(2.79e12)
    ('1.191 PFLOP', '0.028 PFLOP', '2.790 TFLOP')
    """
    return f"{count / 1e15:,.3f} PFLOP" if count >= 1e13 else f"{count / 1e12:,.3f} TFLOP"


def format_plan(plan, name: str) -> str:
    """The plan as `albert-plan` prints it.

    Args:
        plan: from `albert_tf.planning.make_plan`.
        name: how to call the model (the preset or config file).
    """
    c, m = plan.config, plan.memory
    rate = plan.device.peak_flops if plan.precision != "float32" else plan.device.float32_flops
    accumulation = plan.gradient_accumulation_steps
    fits = plan.smallest_accumulation
    rows = [
        ("weights (float32)", _size(m.weights)),
        (f"optimizer state ({plan.optimizer}, 2 float32 slots)", _size(m.optimizer_state)),
        ("gradients (float32" + (", + accumulator)" if accumulation > 1 else ")"), _size(m.gradients)),
        (f"weight copies ({plan.precision})", _size(m.weight_copies)),
        ("activations (no rematerialisation)", _size(m.activations)),
        ("per-call gradients of shared layers", _size(m.shared_gradients)),
        ("  (the step holds the larger of these two)", ""),
        ("total", _size(m.total)),
    ]
    lines = [
        f"model: {name} (sharing={c.sharing}, H={c.hidden_size}, L={c.num_hidden_layers}, E={c.embedding_size}, "
        f"V={c.vocab_size}), seq {plan.seq}, {plan.preds} predictions/seq, {plan.precision}, {plan.optimizer}",
        f"batch: {plan.train_batch_size} = {_replicas(plan.num_replicas)} x {accumulation} accumulation x "
        f"{m.micro_batch} micro-batch",
        f"parameters: {planning.parameter_count(c):,}",
        f"memory per replica (micro-batch {m.micro_batch}; albert-tf offers no rematerialisation):",
    ] + [f"  {label:<40} {value:>12}".rstrip() for label, value in rows] + [
        f"device: {plan.device.name}, {_size(plan.device.memory_bytes)}, {rate / 1e12:,.1f} TFLOP/s peak "
        f"({plan.device.source})",
        f"fits: {'yes' if plan.fits else 'NO'} ({_size(plan.usable_bytes)} usable at {plan.headroom:.0%} headroom)",
        f"largest micro-batch that fits: {plan.largest_micro_batch} (with accumulation {accumulation})",
        "smallest accumulation that fits: " + (
            f"{fits} (micro-batch {plan.train_batch_size // plan.num_replicas // fits})" if fits
            else "none (not even one sequence per replica fits)"),
        f"model FLOPs per step: {_flops(plan.flops_per_step)} (3 x forward matmuls, MLM head on "
        f"{plan.preds} positions)",
        f"estimated step time: {plan.step_seconds:,.3f} s at {plan.peak_fraction:.0%} of peak on "
        f"{_replicas(plan.num_replicas)}",
    ]
    return "\n".join(lines) + "\n"


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    precision = "bfloat16" if FLAGS.mixed_precision == "auto" else FLAGS.mixed_precision
    try:
        plan = planning.make_plan(
            _config(), seq=FLAGS.max_seq_length, preds=FLAGS.max_predictions_per_seq,
            train_batch_size=FLAGS.train_batch_size, num_replicas=FLAGS.num_replicas,
            gradient_accumulation_steps=FLAGS.gradient_accumulation_steps, precision=precision,
            optimizer=FLAGS.optimizer, device=_device(), peak_fraction=FLAGS.peak_fraction,
            headroom=FLAGS.headroom)
    except ValueError as error:
        # The planner names its arguments as the flags do; say they are flags.
        message = str(error)
        if message.startswith("precision="):
            message = "--mixed_" + message
        for name in ("max_seq_length", "max_predictions_per_seq", "train_batch_size", "num_replicas",
                     "gradient_accumulation_steps", "peak_fraction", "headroom"):
            if message.startswith(name):
                message = "--" + message
        raise ValueError(message) from None
    name = FLAGS.albert_config_file or FLAGS.preset
    sys.stdout.write(format_plan(plan, name))


def run() -> None:
    """Console-script entry point."""
    from albert_tf.bin.common import run_binary

    # run_binary loads TensorFlow to quiet its start-up log unless the user
    # chose a log level; a --preset plan needs no TensorFlow, so choose one
    # (_config loads it quietly for a config file).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    run_binary(main, _define_flags, "albert-plan", __doc__)


if __name__ == "__main__":
    run()
