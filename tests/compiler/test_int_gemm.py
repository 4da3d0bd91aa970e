"""Quantized matmuls compiled for the CPU run as integer GEMMs (int16 pairs into int32, zero points subtracted
while packing) and equal the reference interpreter exactly, on every instruction set the C may be built for."""

import numpy as np
import pytest

import luminal as lm
from luminal import dtypes as dt
from luminal import functional as F
from luminal.compiler.analysis import int_gemm_plan
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.int_ranges import value_range
from luminal.runtime import cpu


def _centred(t, zero):
    return F.sub(F.cast(t, dt.int32), F.cast(zero, dt.int32))


def quantized_matmul(a_shape, b_shape, a_type, b_type, per_axis: bool = False, seed: int = 0):
    """(a - a_zero) @ (b - b_zero) in int32, as MatMulInteger imports, and random operands for it. With
    `per_axis`, a zero point per row of a and per column of b."""
    g, rng = lm.Graph(), np.random.default_rng(seed)
    a = g.input("a", a_shape, dtype=a_type)
    b = g.weight("b", b_shape, dtype=b_type)
    za = g.input("za", (a_shape[-2], 1) if per_axis else (), dtype=a_type)
    zb = g.weight("zb", (b_shape[-1],) if per_axis else (), dtype=b_type)
    F.matmul(_centred(a, za), _centred(b, zb)).output("y")

    def values(shape, dtype):
        info = np.iinfo(dtype.np)
        return rng.integers(info.min, info.max, shape, dtype=dtype.np, endpoint=True)

    g.bind({"b": values(b_shape, b_type), "zb": values((b_shape[-1],) if per_axis else (), b_type)})
    return g, lambda shape: {"a": values(shape, a_type), "za": values((shape[-2], 1) if per_axis else (), a_type)}


def integer_gemms(program) -> int:
    return sum(int_gemm_plan.plan(k) is not None for k in program.kernels.kernels)


CASES = [
    ((lm.sym("m", max=64), 64), (64, 24), dt.uint8, dt.int8, False, {"m": 5}),  # one row panel, N under a panel
    ((lm.sym("m", max=64), 77), (77, 40), dt.uint8, dt.int8, False, {"m": 29}),  # odd K, edges on both sides
    ((lm.sym("m", max=64), 300), (300, 70), dt.int8, dt.int8, True, {"m": 13}),  # zero points per row / column
    ((3, 17, 33), (33, 9), dt.uint8, dt.uint8, False, {}),  # a batch of A's rows, B shared
    ((2, 11, 531), (2, 531, 35), dt.int8, dt.uint8, False, {}),  # batched B; K in 3 blocks of whole pairs
]


@pytest.mark.parametrize("a_shape, b_shape, a_type, b_type, per_axis, dims", CASES)
def test_integer_gemm_equals_the_reference(a_shape, b_shape, a_type, b_type, per_axis, dims):
    g, inputs = quantized_matmul(a_shape, b_shape, a_type, b_type, per_axis)
    program = lm.compile(g, target="cpu", cache=False)
    assert integer_gemms(program) == 1 and "lm_imicro(" in program.source
    # The centred copies of the operands are gone: nothing int32 but the output.
    assert [b.role for b in program.kernels.buffers.values() if b.dtype == dt.int32] == ["temp"]
    shape = tuple(dims.get(str(d), d) if not isinstance(d, int) else d for d in a_shape)
    feed = inputs(shape)
    np.testing.assert_array_equal(program.run(feed)["y"], lm.run(g, feed)["y"])


@pytest.mark.parametrize("flags", [[], ["-mno-avx512vnni"], ["-mno-avx512f"], ["-mno-avx2", "-mno-avx512f"]], ids=str)
def test_every_instruction_set_gives_the_same_sums(monkeypatch, flags):
    """VNNI's vpdpwssd, AVX-512BW's and AVX2's vpmaddwd, and the portable vector code: the extremes (-255 * -255
    summed over K = 34,000, past -2^31) wrap as the reference's int32 sum does."""
    monkeypatch.setattr(cpu, "CFLAGS", [*cpu.CFLAGS, *flags])
    k = 34_000
    g, _ = quantized_matmul((3, k), (k, 5), dt.int8, dt.uint8)
    g.bind({"b": np.full((k, 5), 255, np.uint8), "zb": np.array(0, np.uint8)})
    a = np.where(np.arange(3 * k).reshape(3, k) % 500 == 0, 127, -128).astype(np.int8)
    feed = {"a": a, "za": np.array(127, np.int8)}  # centred: 0 or -255
    program = lm.compile(g, target="cpu", cache=False)
    assert integer_gemms(program) == 1
    want = lm.run(g, feed)["y"]
    assert (want > 0).all()  # every sum of products <= 0 wrapped past -2^31
    np.testing.assert_array_equal(program.run(feed)["y"], want)


def test_an_int32_matmul_of_unbounded_values_stays_a_loop():
    """int32 operands may not fit int16: no integer GEMM, and the loop is exact."""
    g = lm.Graph()
    F.matmul(g.input("a", (6, 10), dtype=dt.int32), g.input("b", (10, 4), dtype=dt.int32)).output("y")
    program = lm.compile(g, target="cpu", cache=False)
    assert integer_gemms(program) == 0
    rng = np.random.default_rng(1)
    feed = {"a": rng.integers(-(2**31), 2**31, (6, 10), dtype=np.int32), "b": rng.integers(-9, 9, (10, 4), np.int32)}
    np.testing.assert_array_equal(program.run(feed)["y"], lm.run(g, feed)["y"])


def test_value_ranges():
    u8 = ir.Load("x", 0, dt.uint8)
    centred = ir.Apply(
        "Add",
        (
            ir.Apply("Cast", (u8,), dt.int32),
            ir.Apply("Mul", (ir.Apply("Cast", (u8,), dt.int32), ir.Const(-1, dt.int32)), dt.int32),
        ),
        dt.int32,
    )
    assert value_range(centred) == (-255, 255)
    assert value_range(ir.Apply("Cast", (centred,), dt.int8)) == (-128, 127)  # wraps: the type's range
    assert value_range(ir.Guard(1, ir.Apply("Cast", (u8,), dt.int32), dt.int32)) == (0, 255)
    square = ir.Apply("Mul", (centred, centred), dt.int16)  # 255^2 does not fit int16
    assert value_range(square) == (-32768, 32767)
    assert value_range(ir.Load("f", 0, dt.float32)) is None
