"""Type promotion against PyTorch: every pair of the thirteen dtypes, and tensors with Python scalars.

torch 2.13 refuses to promote its limited types (uint16, uint32, uint64) with other integers or bool, and has no
kernels for most ops on them: a refused promotion must be refused here too (DTypeError), and an op torch lacks a
kernel for is checked by its dtype rule alone (torch.result_type)."""

import itertools

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.functional as F
from luminal import dtypes as dt

TORCH = {
    dt.float32: torch.float32,
    dt.float64: torch.float64,
    dt.float16: torch.float16,
    dt.bfloat16: torch.bfloat16,
    dt.int8: torch.int8,
    dt.int16: torch.int16,
    dt.int32: torch.int32,
    dt.int64: torch.int64,
    dt.uint8: torch.uint8,
    dt.uint16: torch.uint16,
    dt.uint32: torch.uint32,
    dt.uint64: torch.uint64,
    dt.bool_: torch.bool,
}
PAIRS = list(itertools.product(dt.ALL, repeat=2))
SCALARS = [True, 3, -2, 2.5]


def _name(d: dt.DType) -> str:
    return d.name


def test_every_dtype_is_covered():
    assert set(dt.ALL) == set(TORCH)


def _torch_refuses(a: dt.DType, b: dt.DType) -> bool:
    try:
        torch.promote_types(TORCH[a], TORCH[b])
    except RuntimeError as e:
        assert "Promotion for uint16, uint32, uint64 types is not supported" in str(e)
        return True
    return False


def _torch_dtype(fn, *args) -> torch.dtype:
    """The dtype `fn` gives; for an op torch has no kernel for on a limited type, its dtype rule instead."""
    try:
        return fn(*args).dtype
    except (RuntimeError, NotImplementedError) as e:
        if "not implemented for 'UInt" not in str(e):
            raise
        return torch.result_type(*args)


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_promote_matches_torch_promote_types(a, b):
    if _torch_refuses(a, b):
        with pytest.raises(dt.DTypeError, match=f"cannot promote {a.name} with {b.name}.*torch"):
            dt.promote(a, b)
    else:
        assert dt.promote(a, b) == dt.dtype_of(torch.promote_types(TORCH[a], TORCH[b]))


def test_integer_ranges_and_wrapping():
    for d in dt.INTEGERS:
        info = np.iinfo(d.np)
        assert (d.min, d.max) == (info.min, info.max), d
        assert d.wrap(d.max + 1) == d.min and d.wrap(d.min - 1) == d.max, d
    assert dt.uint8.wrap(300) == 44 and dt.int8.wrap(200) == -56 and dt.uint64.wrap(-1) == 2**64 - 1


@pytest.mark.parametrize("d", dt.ALL, ids=_name)
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
def test_scalar_promotion_matches_torch_result_type(d, scalar):
    want = torch.result_type(torch.zeros(2, dtype=TORCH[d]), scalar)
    assert dt.promote_scalar(d, scalar) == dt.dtype_of(want)


def test_out_of_range_scalars_wrap_into_the_tensor_type_as_in_torch():
    """uint8 200 + 300 is 244 and uint8 200 < -1 is true: torch converts the scalar to uint8 first."""
    g = lm.Graph()
    x = g.input("x", (2,), dtype=lm.uint8)
    (x + 300).output("sum")
    (x < -1).output("less")
    out = lm.run(g, {"x": np.array([200, 0], np.uint8)})
    t = torch.tensor([200, 0], dtype=torch.uint8)
    np.testing.assert_array_equal(out["sum"], (t + 300).numpy())
    np.testing.assert_array_equal(out["less"], (t < -1).numpy())


@pytest.mark.parametrize("a,b", itertools.product(SCALARS, repeat=2))
def test_result_type_of_two_scalars(a, b):
    assert F.result_type(a, b) == dt.dtype_of(torch.result_type(torch.tensor(a), b))


def test_dtype_of_accepts_torch_numpy_python_and_names():
    for d, t in TORCH.items():
        assert dt.dtype_of(t) == d
        assert dt.dtype_of(d.name) == d
        assert dt.dtype_of(d.np) == d
    assert (dt.dtype_of(float), dt.dtype_of(int), dt.dtype_of(bool)) == (dt.float32, dt.int64, dt.bool_)
    assert dt.dtype_of("double") == dt.dtype_of(np.float64) == dt.float64
    with pytest.raises(dt.DTypeError, match="complex128"):
        dt.dtype_of(np.complex128)


def _graph_dtype(fn, *dtypes):
    g = lm.Graph()
    xs = [g.input(f"x{k}", (2,), dtype=d) for k, d in enumerate(dtypes)]
    return fn(*xs).dtype


BINARY = ["add", "mul", "div", "maximum", "minimum", "eq", "lt"]


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_recorded_ops_follow_torch(a, b):
    """The dtype each recorded op produces equals torch's for the same operand dtypes."""
    ta, tb = torch.ones(2, dtype=TORCH[a]), torch.ones(2, dtype=TORCH[b])
    if _torch_refuses(a, b):
        for name in BINARY:
            with pytest.raises(dt.DTypeError, match="cannot promote"):
                _graph_dtype(getattr(F, name), a, b)
        return
    for name in BINARY:
        want = _torch_dtype(getattr(torch, name), ta, tb)
        if name in ("eq", "lt"):
            want = torch.bool  # a comparison's dtype, where torch has no kernel
        elif name == "div" and not want.is_floating_point:
            want = torch.float32  # true division of integers
        assert _graph_dtype(getattr(F, name), a, b) == dt.dtype_of(want), f"{name}({a.name}, {b.name})"
    want = torch.where(torch.ones(2, dtype=torch.bool), ta, tb).dtype
    assert _graph_dtype(lambda c, x, y: F.where(c, x, y), dt.bool_, a, b) == dt.dtype_of(want)


@pytest.mark.parametrize("d", dt.ALL, ids=_name)
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
def test_recorded_ops_with_scalars_follow_torch(d, scalar):
    t = torch.ones(2, dtype=TORCH[d])
    assert _graph_dtype(lambda x: x * scalar, d) == dt.dtype_of(_torch_dtype(torch.mul, t, scalar))
    assert _graph_dtype(lambda x: scalar + x, d) == dt.dtype_of(_torch_dtype(torch.add, t, scalar))
    want = _torch_dtype(torch.div, t, scalar)
    assert _graph_dtype(lambda x: x / scalar, d) == dt.dtype_of(want if want.is_floating_point else torch.float32)
    assert _graph_dtype(lambda x: x < scalar, d) == dt.bool_


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_zero_dim_tensors_promote_like_torch(a, b):
    """A 0-dim tensor only decides the dtype when its category is higher (torch's three-tier rule)."""
    zero, full = torch.ones((), dtype=TORCH[a]), torch.ones(3, dtype=TORCH[b])
    try:
        torch.result_type(zero, full)
    except RuntimeError:  # a 0-dim uint16 .. uint64 against bool: torch refuses, so does luminal
        g = lm.Graph()
        with pytest.raises(dt.DTypeError, match="cannot promote"):
            F.add(g.input("z", (), dtype=a), g.input("f", (3,), dtype=b))
        return
    for name in ("add", "mul", "maximum", "where"):
        g = lm.Graph()
        z, f = g.input("z", (), dtype=a), g.input("f", (3,), dtype=b)
        if name == "where":
            cond = g.input("c", (3,), dtype=lm.bool_)
            got = F.where(cond, z, f).dtype
            want = torch.where(torch.ones(3, dtype=torch.bool), zero, full).dtype
        else:
            got = getattr(F, name)(z, f).dtype
            want = _torch_dtype(getattr(torch, name), zero, full)
        assert got == dt.dtype_of(want), f"{name}(0-dim {a.name}, {b.name}[3])"
