"""int8, uint8, int16, uint16, uint32, uint64 against PyTorch: casts, wrapping arithmetic, comparisons above the
signed range, reductions, gathers, where/maximum/minimum, integer division.

torch 2.13 has kernels for int8, uint8 and int16, but few for its limited types uint16, uint32 and uint64 (no add,
lt, max...). For those the reference is torch computing in int64, cast back to the type: exact for uint16 and
uint32, and for uint64 as long as the values stay below 2^63 (modular ops such as add and mul are exact for
any value). uint64 comparisons, maxima and division of values at or above 2^63 are checked against numpy instead.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.functional as F
from tests.opcheck import check

FULL = ["int8", "uint8", "int16"]  # torch has kernels for these
LIMITED = ["uint16", "uint32", "uint64"]
INTS = FULL + LIMITED + ["int32", "int64"]
SHAPE = (4, 6)


def _rand(dtype: str, seed: int = 0, shape=SHAPE, low: int | None = None, high: int | None = None) -> np.ndarray:
    """Values over the type's whole range (below 2^63 for uint64, so the int64 reference holds them)."""
    info = np.iinfo(dtype)
    lo = int(info.min) if low is None else low
    hi = min(int(info.max), 2**63 - 1) if high is None else high
    rng = np.random.default_rng(seed)
    kind = np.uint64 if dtype == "uint64" else np.int64
    return rng.integers(lo, hi, size=shape, dtype=kind, endpoint=True).astype(dtype)


def torch_ref(dtype: str, fn, back: bool = True):
    """`fn` in torch, through int64 for the limited types (cast back to `dtype` when `back`)."""
    if dtype not in LIMITED:
        return fn
    target = getattr(torch, dtype)

    def run(*ts):
        out = fn(*[t.to(torch.int64) if t.dtype == target else t for t in ts])
        return out.to(target) if back else out

    return run


@pytest.mark.parametrize("src", INTS + ["float32", "float16", "bfloat16", "bool"])
def test_casts_to_every_dtype(src):
    """Integers wrap modulo 2^bits; floats truncate toward zero, then wrap (-1.5 to uint8 is 255, as torch)."""
    if src == "bool":
        x = np.random.default_rng(1).random(SHAPE) < 0.5
    elif src.startswith("float") or src == "bfloat16":
        x = _float_source(src)
    else:
        x = _rand(src, seed=1)
    for dst in INTS + ["float32", "bool"]:
        check("to", lambda t, d=dst: t.to(getattr(torch, d)), lambda t, d=dst: t.to(d), inputs=[x])


def _float_source(dtype: str) -> np.ndarray:
    """Fractions of both signs within int32's range (where torch's conversion is defined), and exact edges."""
    from tests.opcheck import _random

    x = _random(SHAPE, dtype, -400.0, 400.0, np.random.default_rng(2))
    edges = [-1.5, -0.5, 0.5, 255.0, 256.0, -129.0, 32767.75, 60000.0]  # finite in float16
    x.reshape(-1)[: len(edges)] = np.array(edges, np.float32).astype(x.dtype)
    return x


@pytest.mark.parametrize("dtype", INTS)
def test_wrapping_arithmetic(dtype):
    a, b = _rand(dtype, 3), _rand(dtype, 4)
    for name, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)]:
        check(name, torch_ref(dtype, fn), getattr(F, name), inputs=[a, b])
    check("neg", torch_ref(dtype, torch.neg), F.neg, inputs=[a])
    check("add", torch_ref(dtype, lambda t: t + 7), lambda t: t + 7, inputs=[a])
    check("mul", torch_ref(dtype, lambda t: t * 3), lambda t: t * 3, inputs=[a])
    info = np.iinfo(dtype)
    top, one = np.full((2, 3), info.max, dtype), np.ones((2, 3), dtype)
    # uint8 255 + 1 == 0, int8 127 + 1 == -128, uint64 2^64 - 1 + 1 == 0 (modular: the int64 reference is exact)
    check("add", torch_ref(dtype, torch.add), F.add, inputs=[top, one])
    check("sub", torch_ref(dtype, torch.sub), F.sub, inputs=[np.full((2, 3), info.min, dtype), one])


def test_uint8_wraps_as_torch_does():
    g = lm.Graph()
    x = g.input("x", (3,), dtype=lm.uint8)
    (x + 1).output("y")
    np.testing.assert_array_equal(lm.run(g, {"x": np.array([255, 254, 0], np.uint8)})["y"], [0, 255, 1])


COMPARISONS = [
    ("lt", torch.lt, np.less),
    ("le", torch.le, np.less_equal),
    ("gt", torch.gt, np.greater),
    ("ge", torch.ge, np.greater_equal),
    ("eq", torch.eq, np.equal),
    ("ne", torch.ne, np.not_equal),
]


@pytest.mark.parametrize("dtype", INTS)
def test_comparisons(dtype):
    a, b = _rand(dtype, 5), _rand(dtype, 6)
    b.reshape(-1)[:4] = a.reshape(-1)[:4]  # some ties
    for name, fn, _ in COMPARISONS:
        check(name, torch_ref(dtype, fn, back=False), getattr(F, name), inputs=[a, b])


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_unsigned_values_above_the_signed_range(dtype):
    """200 > 100 in uint8 (as int8, 200 would be -56): comparisons, max and min are unsigned."""
    bits = np.iinfo(dtype).bits
    high = (np.arange(12, dtype=np.uint64).reshape(3, 4) + np.uint64(2 ** (bits - 1))).astype(dtype)
    low = np.arange(12, dtype=dtype).reshape(3, 4)
    a, b = (
        np.where(np.arange(12).reshape(3, 4) % 2 == 0, high, low),
        np.where(np.arange(12).reshape(3, 4) % 3 == 0, low, high),
    )
    for name, _, np_fn in COMPARISONS:
        check(name, lambda x, y, f=np_fn: torch.from_numpy(f(x.numpy(), y.numpy())), getattr(F, name), inputs=[a, b])
    check("maximum", lambda x, y: torch.from_numpy(np.maximum(x.numpy(), y.numpy())), F.maximum, inputs=[a, b])
    check("minimum", lambda x, y: torch.from_numpy(np.minimum(x.numpy(), y.numpy())), F.minimum, inputs=[a, b])
    check("max", lambda x: torch.from_numpy(x.numpy().max(1)), lambda x: x.amax(1), inputs=[a])
    check("argmax", lambda x: torch.from_numpy(x.numpy().argmax(1)), lambda x: x.argmax(1), inputs=[a])


@pytest.mark.parametrize("dtype", INTS)
def test_reductions(dtype):
    x = _rand(dtype, 7)
    check("sum", torch_ref(dtype, lambda t: t.sum(1), back=False), lambda t: t.sum(1), inputs=[x])  # int64
    check("max", torch_ref(dtype, lambda t: t.amax(0)), lambda t: t.amax(0), inputs=[x])
    check("min", torch_ref(dtype, lambda t: t.amin(1)), lambda t: t.amin(1), inputs=[x])
    check("argmin", torch_ref(dtype, lambda t: t.argmin(1), back=False), lambda t: t.argmin(1), inputs=[x])
    check("cumsum", torch_ref(dtype, lambda t: t.cumsum(1), back=False), lambda t: t.cumsum(1), inputs=[x])


@pytest.mark.parametrize("dtype", INTS)
def test_gather_with_and_of_every_integer_type(dtype):
    """The data and the indexes are `dtype`; torch takes int64 indexes only."""
    data = _rand(dtype, 8)
    index = _rand(dtype, 9, shape=(4, 3), low=0, high=5)
    check(
        "gather",
        lambda d, i: torch_ref(dtype, lambda d: torch.gather(d, 1, i.long()))(d),
        lambda d, i: F.gather(d, 1, i),
        inputs=[data, index],
    )
    rows = _rand(dtype, 10, shape=(5,), low=0, high=3)
    check(
        "index_select",
        lambda d, i: torch_ref(dtype, lambda d: d.index_select(0, i.long()))(d),
        lambda d, i: d.index_select(0, i),
        inputs=[data, rows],
        symbolic=False,
    )


@pytest.mark.parametrize("dtype", INTS)
def test_where_maximum_minimum_clamp(dtype):
    a, b = _rand(dtype, 11), _rand(dtype, 12)
    cond = np.random.default_rng(13).random(SHAPE) < 0.5
    check(
        "where", lambda c, x, y: torch_ref(dtype, lambda x, y: torch.where(c, x, y))(x, y), F.where, inputs=[cond, a, b]
    )
    check("maximum", torch_ref(dtype, torch.maximum), F.maximum, inputs=[a, b])
    check("minimum", torch_ref(dtype, torch.minimum), F.minimum, inputs=[a, b])
    lo, hi = (0, 100) if dtype.startswith("u") else (-50, 100)
    check("clamp", torch_ref(dtype, lambda t: t.clamp(lo, hi)), lambda t: t.clamp(lo, hi), inputs=[a])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "uint32", "uint64"])
def test_integer_division(dtype):
    a = _rand(dtype, 14)
    b = _rand(dtype, 15, low=1, high=min(int(np.iinfo(dtype).max), 1000))
    if not dtype.startswith("u"):
        b = np.where(np.arange(b.size).reshape(b.shape) % 2 == 0, b, -b).astype(dtype)  # both signs
    check("floor_divide", torch_ref(dtype, torch.floor_divide), F.floor_divide, inputs=[a, b])
    check("remainder", torch_ref(dtype, torch.remainder), F.remainder, inputs=[a, b])
    check("fmod", torch_ref(dtype, torch.fmod), F.fmod, inputs=[a, b])


def test_uint64_division_above_the_signed_range():
    """uint64 quotients and remainders of values at or above 2^63 (dividends and divisors), against numpy:
    torch has no uint64 division, and int64 cannot hold these values."""
    rng = np.random.default_rng(16)
    edges = np.array([0, 1, 2, 3, 2**62 + 3, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1], dtype=np.uint64)
    a = np.concatenate([np.repeat(edges, edges.size), rng.integers(0, 2**64 - 1, 60, dtype=np.uint64, endpoint=True)])
    b = np.concatenate([np.tile(edges, edges.size), rng.integers(1, 2**64 - 1, 60, dtype=np.uint64, endpoint=True)])
    b = np.where(b == 0, np.uint64(7), b).reshape(8, 20)  # division by zero is undefined (torch raises)
    a = a.reshape(8, 20)
    b[:, :3] = rng.integers(1, 1000, (8, 3), dtype=np.uint64)  # small divisors of large dividends
    for name, np_fn, fn in [
        ("floor_divide", np.floor_divide, F.floor_divide),
        ("remainder", np.remainder, F.remainder),
        ("div", np.floor_divide, lambda x, y: F.div(x, y, rounding_mode="trunc")),
    ]:
        check(name, lambda x, y, f=np_fn: torch.from_numpy(f(x.numpy(), y.numpy())), fn, inputs=[a, b])
