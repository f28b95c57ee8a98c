"""The form `export_openvino` traces a model in: the one OpenVINO's CPU plugin runs fastest, per CPU kind.

OpenVINO turns the weights into constants and fuses patterns of ops into its own; the forms below are the
patterns it runs fastest (`bench/studies/openvino_layers.py`, `bench/studies/serving_nodes.py`):

- every dense layer as MatMul + bias add (`tracing_for_constant_weights`);
- LayerNormalization in the form OpenVINO fuses into one MVN op (`tracing_layer_norms_for_openvino`);
- attention's 1/sqrt(head size) in the query weights (`tracing_attention_scale_in_queries`), where OpenVINO
  would fuse the scores' Multiply into a projection as a post-op;
- on CPU kinds that infer in float32 (AVX2, AVX-512 without bfloat16), the tanh GELU outside the matmul
  before it (`tracing_gelu_outside_matmuls`): OpenVINO runs a float32 matmul without post-op on its MLAS
  GEMM, one with a fused GELU on a slower kernel (AVX2, batch 1 x 128: 4.1 against 6.3 ms for the FFN's
  768 x 3072 projection, `bench/results/serving_nodes_avx2_before.md`). On bfloat16 kinds (AMX, AVX-512
  BF16) every matmul runs on oneDNN's kernels, where the fused GELU costs nothing, so it stays fused there.
  An int8 export takes its kind's form too: its report's float figures are then those of the float export.
- in an int8 graph, the tokens as one rank-3 [1, tokens, hidden] row, not a [tokens, hidden] matrix
  (`tracing_tokens_in_rank3`): OpenVINO then fuses NNCF's activation quantizers (FakeQuantize) into the ops
  before them; on the 2-D matrix it left them stand-alone, 50 of 1118 ms a batch-32 x 128 call on AVX-512 VNNI
  (`bench/results/int8-avx512-bf16-profile.md`).

The IR records the kind it was made for in its rt_info (["albert_tf", "target_cpu"]); it answers the same on any CPU.

Example:

>>> gelu_outside_matmuls("avx2"), gelu_outside_matmuls("amx")
(True, False)
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

from albert_tf import cpu

CPU_KINDS = ("avx2", "avx512", "avx512-bf16", "amx", "other")


def target_kind(target_cpu: Optional[str]) -> str:
    """`target_cpu` checked, or this machine's kind for None.

    Raises:
        ValueError: not one of CPU_KINDS (the message quotes it).
    """
    if target_cpu is None:
        return cpu.cpu_kind(cpu.cpu_flags())
    if target_cpu not in CPU_KINDS:
        raise ValueError(f"target_cpu={target_cpu!r}: expected one of {CPU_KINDS} (or None: this machine's kind).")
    return target_cpu


def gelu_outside_matmuls(kind: str) -> bool:
    """Whether a model for CPUs of `kind` computes the tanh GELU outside its matmul (the kinds that infer in
    float32)."""
    return kind not in cpu.BFLOAT16_KINDS


@contextlib.contextmanager
def tracing_for_openvino(kind: str, quantized: bool = False) -> Iterator[None]:
    """Traces the layers within the context in the forms above, for CPUs of `kind` (`quantized`: for an int8
    graph, whose tokens also stay rank-3)."""
    from absl import logging

    from albert_tf.layers import fused

    outside = gelu_outside_matmuls(kind)
    logging.info("OpenVINO graph for the %s CPU kind: the GELU %s its matmul.", kind, "outside" if outside else "fused into")
    with contextlib.ExitStack() as stack:
        stack.enter_context(fused.tracing_for_constant_weights())
        stack.enter_context(fused.tracing_layer_norms_for_openvino())
        stack.enter_context(fused.tracing_attention_scale_in_queries())
        if quantized:
            stack.enter_context(fused.tracing_tokens_in_rank3())
        if outside:
            stack.enter_context(fused.tracing_gelu_outside_matmuls())
        yield
