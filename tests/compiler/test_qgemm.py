"""Q8_0 linear layers compiled for the CPU: the int8 weight is read by the GEMM itself (never a float copy of it in
the program), and the result is the reference interpreter's within float rounding."""

import numpy as np
import pytest

import luminal as lm
from luminal import functional as F
from luminal.quantize import dequantize, quantize_q8_0


def quantised_linear(x_shape, n: int, k: int, transpose_x: bool = False, epilogue: bool = True):
    g = lm.Graph()
    x = g.input("x", x_shape)
    if transpose_x:
        x = x.transpose(-1, -2)
    w = dequantize(g.weight("w", (n, k), lm.int8), g.weight("w_scale", (n, k // 32)))
    y = F.linear(x, w, g.weight("b", (n,)) if epilogue else None)
    (y.relu() if epilogue else y).output("y")
    rng = np.random.default_rng(n * k)
    q, s = quantize_q8_0(rng.standard_normal((n, k)).astype(np.float32))
    g.bind({"w": q, "w_scale": s, "b": rng.standard_normal(n).astype(np.float32)})
    return g


def float_buffers_of_weight_size(program, n: int, k: int) -> list:
    return [b for b in program.kernels.buffers.values() if b.dtype == lm.float32 and b.role != "input"
            and b.size.is_const and b.size.value >= n * k]  # fmt: skip


@pytest.mark.parametrize(
    "x_shape, dims",
    [
        ((lm.sym("b", max=16), 96), {"b": 1}),  # a decode step's GEMV
        ((lm.sym("b", max=16), 96), {"b": 9}),  # 4 + 4 + 1 rows
        ((2, lm.sym("s", max=8), 96), {"s": 3}),  # rows over two axes
    ],
)
def test_q8_gemm_matches_the_reference_and_reads_int8(x_shape, dims):
    g = quantised_linear(x_shape, 40, 96)
    shape = tuple(dims.get(str(d), d) if not isinstance(d, int) else d for d in x_shape)
    xs = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    program = lm.compile(g, target="cpu", cache=False)
    np.testing.assert_allclose(program.run(xs)["y"], lm.run(g, xs)["y"], rtol=1e-4, atol=1e-4)
    assert "lm_qdot" in program.source and "const int8_t* restrict" in program.source
    assert float_buffers_of_weight_size(program, 40, 96) == []
    assert not any(b.role == "packed" for b in program.kernels.buffers.values())


def test_q8_gemm_packs_an_operand_it_cannot_read_in_place():
    g = quantised_linear((64, 5), 24, 64, transpose_x=True, epilogue=False)  # A is x.T: not rows in memory
    xs = {"x": np.random.default_rng(4).standard_normal((64, 5)).astype(np.float32)}
    program = lm.compile(g, target="cpu", cache=False)
    np.testing.assert_allclose(program.run(xs)["y"], lm.run(g, xs)["y"], rtol=1e-4, atol=1e-4)
    assert "lm_qdot" in program.source and float_buffers_of_weight_size(program, 24, 64) == []


def test_a_float_linear_still_packs_its_weight_once():
    g = lm.Graph()
    F.linear(g.input("x", (lm.sym("b", max=8), 64)), g.weight("w", (48, 64))).output("y")
    g.bind({"w": np.ones((48, 64), np.float32)})
    program = lm.compile(g, target="cpu", cache=False)
    assert "lm_qdot" not in program.source
    assert any(b.role == "packed" for b in program.kernels.buffers.values())


@pytest.mark.parametrize("k", [96, 128])  # an odd and an even count of blocks
def test_a_rows_result_is_the_same_bits_alone_as_in_a_batch(k):
    """Batch invariance of the weight-only kernel: 9 rows take the 4-row dot (lm_qdot4) twice and the 1-row dot
    once; each row alone takes the 1-row dot, and must add its blocks in the same order."""
    g = quantised_linear((lm.sym("b", max=16), k), 40, k)
    x = np.random.default_rng(5).standard_normal((9, k)).astype(np.float32)
    program = lm.compile(g, target="cpu", cache=False)
    together = program.run({"x": x})["y"]
    np.testing.assert_allclose(together, lm.run(g, {"x": x})["y"], rtol=1e-4, atol=1e-4)
    for r in range(len(x)):
        np.testing.assert_array_equal(program.run({"x": x[r : r + 1]})["y"][0], together[r])
