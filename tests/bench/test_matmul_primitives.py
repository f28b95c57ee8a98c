"""bench.studies.matmul_primitives: its variants compute the dense formula; its kernel parser reads oneDNN lines."""

import math

import numpy as np
import pytest

from bench.studies import matmul_primitives


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def test_variants_compute_the_dense_layer():
    shapes = {"tiny + GELU": (16, 32), "tiny": (32, 16)}
    functions = matmul_primitives._functions(8, shapes, seed=3)
    rng = np.random.default_rng(3)
    for name, (k, n) in shapes.items():
        # The same draws, in the same order, as _functions makes them.
        x = rng.normal(size=(8, k)).astype(np.float32)
        w = (rng.normal(size=(k, n)) * 0.02).astype(np.float32)
        b = rng.normal(size=(n,)).astype(np.float32)
        y = x @ w
        dense = _gelu_tanh(y + b) if "GELU" in name else y + b
        # bfloat16 inputs and outputs: 8 bits of mantissa.
        for variant in ("fused", "fused_const", "matmul_add"):
            np.testing.assert_allclose(functions[(name, variant)]().numpy().astype(np.float32), dense,
                                       rtol=0.03, atol=0.03, err_msg=f"{name} {variant}")
        np.testing.assert_allclose(functions[(name, "matmul")]().numpy().astype(np.float32), y, rtol=0.03, atol=0.03)


def test_parse_kernels_reads_the_kernel_between_markers():
    out = "\n".join([
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,before any marker",
        "### variant a|fused",
        "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,src:bf16",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,x64:gemm:jit,forward_training",
        "onednn_verbose,v1,primitive,exec,cpu,inner_product,x64:gemm:jit,forward_training",
        "### end",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,next variant's first call",
        "### variant a|matmul",
        "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,x",
        "### end",
    ])
    assert matmul_primitives.parse_kernels(out) == {
        "a|fused": "inner_product x64:gemm:jit", "a|matmul": "matmul brg_matmul:avx10_1_512_amx"}


def test_time_variants_returns_every_variant():
    table = matmul_primitives.time_variants(4, rounds=1, calls=1, shapes={"tiny": (8, 8)})
    assert set(table["tiny"]) == set(matmul_primitives.VARIANTS)
    assert all(ms > 0 for ms in table["tiny"].values())


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        matmul_primitives.main(["--tokens", "0"])
