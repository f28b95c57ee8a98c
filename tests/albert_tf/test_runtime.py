"""albert_tf.runtime: strategy, chief and precision choices shared by the binaries."""

import pytest
import tensorflow as tf

import albert_tf
from albert_tf import runtime, training

import flags.core_flags as albert_flags


def _fake_gpus(monkeypatch, details):
    """list_physical_devices("GPU") -> one fake device per entry of `details`,
    and get_device_details -> that entry (what TensorFlow reports for a GPU)."""
    real = tf.config.list_physical_devices
    gpus = [f"GPU:{i}" for i in range(len(details))]
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: gpus if kind == "GPU" else real(kind))
    monkeypatch.setattr(tf.config.experimental, "get_device_details",
                        lambda device: dict(details[gpus.index(device)]))


@pytest.mark.parametrize("cpu_flags,want", [
    ("fpu avx2 avx512f", "float32"),
    ("fpu avx512f amx_bf16 amx_tile", "bfloat16"),
    ("fpu avx512f avx512_bf16", "bfloat16"),  # AVX-512 bf16 dot products, no AMX
])
def test_auto_precision_on_a_cpu_follows_its_flags(monkeypatch, cpu_flags, want):
    _fake_gpus(monkeypatch, [])
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: frozenset(cpu_flags.split()))
    assert runtime.resolve_mixed_precision("auto") == want


# What get_device_details returns on real GPUs: {"device_name": ..., "compute_capability": (major, minor)}.
@pytest.mark.parametrize("gpus,want", [
    ([("NVIDIA H200", (9, 0))], "bfloat16"),
    ([("NVIDIA A100-SXM4-80GB", (8, 0))], "bfloat16"),
    ([("NVIDIA GeForce RTX 3090", (8, 6)), ("NVIDIA L4", (8, 9))], "bfloat16"),
    ([("Tesla V100-SXM2-16GB", (7, 0))], "float16"),
    ([("Tesla T4", (7, 5))], "float16"),
    # Mixed generations: the slowest GPU decides (all replicas run one program).
    ([("NVIDIA A100", (8, 0)), ("Tesla T4", (7, 5))], "float16"),
    ([("Tesla P100-PCIE-16GB", (6, 0))], "float32"),
    ([("NVIDIA GeForce GTX 1080", (6, 1))], "float32"),
    ([("Tesla K80", (3, 7))], "float32"),
    ([("AMD Instinct (no capability reported)", None)], "float32"),
])
def test_auto_precision_follows_the_gpu_generation(monkeypatch, gpus, want):
    details = [{"device_name": name, **({"compute_capability": cc} if cc else {})}
               for name, cc in gpus]
    _fake_gpus(monkeypatch, details)
    # A GPU decides, whatever the CPU can do.
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: frozenset({"amx_bf16"}))
    assert runtime.gpu_compute_capabilities() == [cc for _, cc in gpus]
    assert runtime.resolve_mixed_precision("auto") == want


def test_auto_on_a_volta_or_turing_gpu_trains_with_loss_scaling(monkeypatch, tmp_path):
    """"auto" -> float16 on 7.x: the training state gets a dynamic loss scale."""
    from albert_tf.training.state import TrainState

    _fake_gpus(monkeypatch, [{"device_name": "Tesla T4", "compute_capability": (7, 5)}])
    precision = training.RuntimeConfig(mixed_precision="auto").resolved_precision()
    assert precision == "float16"
    monkeypatch.undo()  # build the state on the real (CPU) devices
    state = TrainState.create(albert_tf.AlbertConfig.tiny(), training.OptimizationConfig(
        train_batch_size=2, num_train_steps=1, num_warmup_steps=0), precision,
        tf.distribute.get_strategy(), str(tmp_path), 1)
    assert state.loss_scale is not None
    assert state.model.dtype_policy.name == "mixed_float16"


def test_gpu_precision_needs_a_gpu():
    with pytest.raises(ValueError, match="at least one"):
        runtime.gpu_precision([])


def test_amx_is_read_from_cpuinfo(monkeypatch, tmp_path):
    import builtins

    fake = tmp_path / "cpuinfo"
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        return real_open(fake if path == "/proc/cpuinfo" else path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    fake.write_text("flags\t: fpu avx512f amx_bf16 amx_tile\n")
    assert runtime._cpu_has_amx()
    fake.write_text("flags\t: fpu avx512f avx512_bf16\n")
    assert not runtime._cpu_has_amx()
    assert runtime._cpu_has_fast_bfloat16()
    fake.write_text("processor\t: 0\nflags\t: fpu avx2 avx512f\n")
    assert not runtime._cpu_has_fast_bfloat16()


def test_xla_is_never_the_default_on_a_cpu(monkeypatch):
    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: [] if kind in ("GPU", "TPU") else real(kind))
    assert runtime.default_jit_compile() is False
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["GPU:0"] if kind == "GPU" else real(kind))
    assert runtime.default_jit_compile() is True


def test_explicit_precisions_and_policies():
    for choice in ("float32", "bfloat16", "float16"):
        assert runtime.resolve_mixed_precision(choice) == choice
    assert [runtime.dtype_policy_name(p) for p in ("float32", "bfloat16", "float16")] == [
        "float32", "mixed_bfloat16", "mixed_float16"]
    with pytest.raises(ValueError, match="'half'"):
        runtime.resolve_mixed_precision("half")
    with pytest.raises(ValueError, match="resolve 'auto'"):
        runtime.dtype_policy_name("auto")


def test_flag_choices_and_default_match_the_runtime():
    # The flags module keeps its own copy (it must not import TensorFlow).
    assert albert_flags.MIXED_PRECISION_CHOICES == runtime.MIXED_PRECISION_CHOICES
    assert albert_flags.STRATEGY_CHOICES == runtime.STRATEGY_CHOICES
    from absl import flags

    albert_flags.define_runtime_flags()
    assert flags.FLAGS["mixed_precision"].default == "auto"


def test_strategy_and_chief():
    strategy = runtime.get_strategy("default")
    assert strategy.num_replicas_in_sync == 1
    assert runtime.is_chief(strategy) and runtime.worker_task(strategy) == (None, 0)
    with pytest.raises(ValueError, match="'gpu'.*mirrored"):
        runtime.get_strategy("gpu")
    # The old homes keep working.
    assert albert_tf.get_strategy is runtime.get_strategy
    assert training.get_strategy is runtime.get_strategy
    assert training.is_chief is runtime.is_chief


def test_auto_precision_trains_in_the_loop(tmp_path):
    """RuntimeConfig(mixed_precision="auto") is resolved by the loop."""
    def dataset_fn(ctx):
        example = {"input_ids": tf.ones([8], tf.int32), "input_mask": tf.ones([8], tf.int32),
                   "segment_ids": tf.zeros([8], tf.int32),
                   "masked_lm_positions": tf.constant([1], tf.int32),
                   "masked_lm_ids": tf.constant([5], tf.int32), "masked_lm_weights": tf.ones([1]),
                   "next_sentence_labels": tf.constant(0, tf.int32)}
        return tf.data.Dataset.from_tensors(example).repeat().batch(2)

    result = training.run_pretraining(
        albert_tf.AlbertConfig.tiny(), dataset_fn, str(tmp_path),
        optimization=training.OptimizationConfig(train_batch_size=2, num_train_steps=1, num_warmup_steps=0),
        runtime=training.RuntimeConfig(mixed_precision="auto"))
    want = runtime.dtype_policy_name(runtime.resolve_mixed_precision("auto"))
    assert result["model"].dtype_policy.name == want


def test_mirrored_over_logical_cpu_devices():
    """--num_cpu_devices splits a GPU-less machine's CPU: one replica per device (fresh process:
    devices can be split only before TensorFlow initialises them)."""
    import subprocess
    import sys

    code = ("from albert_tf import runtime; import tensorflow as tf; "
            "s = runtime.get_strategy('mirrored', num_cpu_devices=2); "
            "print(s.num_replicas_in_sync, len(tf.config.list_logical_devices('CPU')))")
    env = {**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["2", "2"]


def test_splitting_an_initialised_cpu_names_the_value():
    tf.constant(1)  # devices are initialised from here on
    have = len(tf.config.list_logical_devices("CPU"))
    runtime.split_cpu(have)  # what it already is: accepted
    with pytest.raises(ValueError, match=f"--num_cpu_devices={have + 1}.*already runs"):
        runtime.split_cpu(have + 1)
    with pytest.raises(ValueError, match="--num_cpu_devices=0"):
        runtime.split_cpu(0)
