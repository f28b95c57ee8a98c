"""Where a training or inference step's time goes: TensorFlow profiler, by op type.

Study (2026-12-01). Question: Where does a training or inference step's time go? Answer: Elementwise work
outside the matmuls (GELU and LayerNorm forward and backward, weight casts, the LAMB update) is about a
quarter of a step's op time (23% in the issue-10 profile; bench/results/performance_notes.md). Command:
`python -m bench.studies.profile_step --precision bfloat16 --batch 8 --seq 128`.

Runs albert-pretrain's step (or the encoder's forward pass) a few times under
`tf.profiler.experimental`, then sums the host-side op events of the trace
(the trace viewer's data, read from the .xplane.pb) by op type, and prints
the share of each next to the matmul share the FLOP count predicts.

    python -m bench.studies.profile_step --precision bfloat16 --batch 8 --seq 128
    python -m bench.studies.profile_step --mode infer --batch 32

With --fusions it also lists the ops of the graphs TensorFlow ran (after
grappler and the oneDNN layout pass, from the run metadata's partition
graphs), with each fused op's `fused_ops`, and counts per op family which
oneDNN fusions fired and which ops stayed unfused:

    python -m bench.studies.profile_step --mode infer --batch 32 --fusions

With --by_name Mul,Cast it also sums those op types' time by op name (the
copies of an op in the unrolled layers merged), to tell GELU's Muls from
LayerNorm's.

The trace stays in --logdir for TensorBoard's profile plugin.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from albert_tf.layers.fused import executed_ops  # noqa: E402
from bench.studies.ab_layers import VARIANTS, patched  # noqa: E402
from bench.systems import common, ours  # noqa: E402

# Op types whose FLOPs are the model's matmuls.
MATMUL_TYPES = ("MatMul", "BatchMatMul", "_MklMatMul", "_MklBatchMatMul", "Einsum", "_MklEinsum",
                "_MklNativeMatMul", "_MklNativeBatchMatMul", "_FusedMatMul", "_MklFusedMatMul",
                "_MklNativeFusedMatMul", "_MklFusedBatchMatMulV2", "BatchMatMulV2", "BatchMatMulV3",
                "_MklBatchMatMulV2")


def _op_type(name: str) -> str:
    """'encoder/attention/MatMul:_MklMatMul' or 'MatMul' -> the op type."""
    if ":" in name:
        return name.rsplit(":", 1)[1]
    return re.sub(r"_\d+$", "", name.rsplit("/", 1)[-1])


def _op_name(name: str) -> str:
    """'.../transformer/ffn_group_inner/Gelu/mul_3:Mul' -> 'Mul .../ffn_group_inner/Gelu/mul' (copies merged)."""
    op, op_type = name.rsplit(":", 1)
    return f"{op_type} {re.sub(r'_[0-9]+(?=/|$)', '', op)}"


def op_type_times(logdir: str, key=None) -> collections.Counter:
    """Microseconds per op type (or per `key(event name)`) over the host plane's TF op events."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    key = key or _op_type

    paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise FileNotFoundError(f"No .xplane.pb under {logdir!r}.")
    space = xplane_pb2.XSpace()
    with open(max(paths, key=os.path.getmtime), "rb") as f:
        space.ParseFromString(f.read())
    totals: collections.Counter = collections.Counter()
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            if "Executor" not in line.name and "tf_" not in line.name and "TF" not in line.name:
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                # TF op events are "name:type"; "...:Process" spans a whole
                # function body (its ops are counted on their own).
                if ":" not in name or name.endswith(":Process") or name.startswith("__inference"):
                    continue
                totals[key(name)] += event.duration_ps / 1e6
    return totals


# (family, fused op types, unfused op types); a fused op counts with its fused_ops.
FUSION_FAMILIES = (
    ("MatMul (+BiasAdd, +activation)", ("_MklNativeFusedMatMul", "_FusedMatMul", "_MklFusedMatMul"),
     ("_MklMatMul", "_MklNativeMatMul", "MatMul")),
    ("BatchMatMul (+Mul, +Add)", ("_MklFusedBatchMatMulV2",),
     ("_MklBatchMatMulV2", "_MklBatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "_MklEinsum", "Einsum")),
    ("LayerNorm (unfused: one Rsqrt each)", ("_MklLayerNorm", "_MklNativeFusedBatchNormV3"), ("Rsqrt",)),
    ("GELU / tanh (unfused: Tanh, Erf ops)", (), ("Tanh", "Erf")),
    ("bias add outside a matmul", (), ("BiasAdd",)),
    ("Cast", (), ("Cast", "_MklCast")),
)


def fusion_table(census: collections.Counter) -> str:
    """Markdown rows: per op family, the fused ops (with what they fuse) and the unfused count."""
    rows = ["| op family | fused (count per executed graph) | unfused |", "|---|---|---|"]
    for family, fused_types, unfused_types in FUSION_FAMILIES:
        fused = {k: n for k, n in census.items() if k.split("[")[0] in fused_types}
        unfused = sum(n for k, n in census.items() if k in unfused_types)
        fused_text = ", ".join(f"{k} x{n}" for k, n in sorted(fused.items())) or "none"
        rows.append(f"| {family} | {fused_text} | {unfused} |")
    return "\n".join(rows)


def _step(args):
    """(run, model FLOPs per call) for --mode at --batch/--seq."""
    import albert_tf
    from albert_tf import runtime
    from albert_tf.training.state import TrainState
    from albert_tf.training.step import build_train_step, distributed_train_iterator

    shape = common.model_shape("albert_base_v2")
    if args.mode == "train":
        strategy = tf.distribute.get_strategy()
        config = albert_tf.AlbertConfig.from_preset("albert_base_v2")
        ex = common.synthetic_pretraining_batch(args.batch, args.seq, common.PREDICTIONS_PER_SEQ,
                                                config.vocab_size)
        state = TrainState.create(config, ours._optimization(args.batch),
                                  runtime.resolve_mixed_precision(args.precision), strategy,
                                  tempfile.mkdtemp(), 1)
        it = distributed_train_iterator(strategy, lambda ctx: tf.data.Dataset.from_tensors(ex).repeat(), 0,
                                        args.seq, common.PREDICTIONS_PER_SEQ, args.batch)
        step_fn = build_train_step(state, strategy, 1, False)
        run = lambda: float(step_fn(it)["mlm_nll_sum"])  # noqa: E731
        flops = common.training_flops(shape, args.seq, common.PREDICTIONS_PER_SEQ) * args.batch
    else:
        enc = albert_tf.AlbertEncoder(
            albert_tf.AlbertConfig.from_preset("albert_base_v2"),
            dtype=runtime.dtype_policy_name(runtime.resolve_mixed_precision(args.precision)))
        inputs = ours._tf_encoder_batch(args.batch, args.seq, 30000)
        fwd = tf.function(lambda x: enc(x, training=False)["pooled_output"])
        run = lambda: fwd(inputs).numpy()  # noqa: E731
        flops = common.forward_flops(shape, args.seq, None) * args.batch
    return run, flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=("train", "infer"), default="train")
    parser.add_argument("--precision", default="bfloat16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--fusions", action="store_true",
                        help="also list the executed graph's ops and which oneDNN fusions fired")
    parser.add_argument("--by_name", default="",
                        help="comma-separated op types (Mul,Cast): also list their time by op name")
    parser.add_argument("--layers", default="after",
                        help="layer code path, a variant of bench.studies.ab_layers ('before': before issue 18)")
    args = parser.parse_args()
    logdir = args.logdir or tempfile.mkdtemp(prefix="albert-profile-")

    run, flops = _step(args)
    with patched(VARIANTS[args.layers]):  # the first call traces
        census = executed_ops(run) if args.fusions else None
        if census is None:
            run()
    for _ in range(2):
        run()
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(args.steps):
        run()
    wall = (time.perf_counter() - start) / args.steps
    tf.profiler.experimental.stop()

    totals = op_type_times(logdir)
    busy = sum(totals.values()) / args.steps
    matmul = sum(v for k, v in totals.items() if k in MATMUL_TYPES) / args.steps
    print(f"{args.mode} {args.precision} batch {args.batch} length {args.seq}: {wall * 1e3:.0f} ms per step "
          f"({args.batch / wall:.2f} seq/s, {flops / wall / 1e9:.0f} model GFLOP/s); op time {busy / 1e3:.0f} ms "
          f"(2 cores run ops in parallel, so it can exceed the wall time)")
    print(f"matmul ops: {matmul / 1e3:.0f} ms = {100 * matmul / busy:.0f}% of op time, "
          f"{flops / (matmul / 1e6) / 1e9:.0f} GFLOP/s while in matmuls")
    print("| op type | ms per step | share |\n|---|---|---|")
    for name, us in totals.most_common(args.top):
        print(f"| {name} | {us / args.steps / 1e3:.1f} | {100 * us / args.steps / busy:.1f}% |")
    if args.by_name:
        types = set(args.by_name.split(","))
        by_name = op_type_times(logdir, key=_op_name)
        print("| op (type and name, copies merged) | ms per step |\n|---|---|")
        for name, us in by_name.most_common():
            if name.split(" ", 1)[0] in types and us / args.steps >= 1e3:
                print(f"| {name} | {us / args.steps / 1e3:.1f} |")
    if census is not None:
        print(fusion_table(census))
        print("| executed op (fused ops) | nodes |\n|---|---|")
        for name, count in census.most_common(args.top):
            print(f"| {name} | {count} |")
    print(f"trace: {logdir}")


if __name__ == "__main__":
    main()
