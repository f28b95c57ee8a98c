"""albert_tf.runtime: strategy, chief and precision choices shared by the binaries."""

import pytest
import tensorflow as tf

import albert_tf
from albert_tf import runtime, training

import flags.core_flags as albert_flags


@pytest.mark.parametrize("gpus,cpu_flags,want", [
    ([], "fpu avx2 avx512f", "float32"),
    ([], "fpu avx512f amx_bf16 amx_tile", "bfloat16"),
    ([], "fpu avx512f avx512_bf16", "bfloat16"),  # AVX-512 bf16 dot products, no AMX
    (["GPU:0"], "fpu", "bfloat16"),
])
def test_auto_precision_follows_the_hardware(monkeypatch, gpus, cpu_flags, want):
    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: gpus if kind == "GPU" else real(kind))
    monkeypatch.setattr(runtime, "_cpu_flags", lambda: frozenset(cpu_flags.split()))
    assert runtime.resolve_mixed_precision("auto") == want


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
