"""Type promotion against PyTorch: every pair of the six dtypes, and tensors with Python scalars."""

import itertools

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.functional as F
from luminal import dtypes as dt

TORCH = {
    dt.float32: torch.float32,
    dt.float16: torch.float16,
    dt.bfloat16: torch.bfloat16,
    dt.int32: torch.int32,
    dt.int64: torch.int64,
    dt.bool_: torch.bool,
}
PAIRS = list(itertools.product(dt.ALL, repeat=2))
SCALARS = [True, 3, -2, 2.5]


def _name(d: dt.DType) -> str:
    return d.name


def test_all_six_dtypes_are_covered():
    assert set(dt.ALL) == set(TORCH)


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_promote_matches_torch_promote_types(a, b):
    assert dt.promote(a, b) == dt.dtype_of(torch.promote_types(TORCH[a], TORCH[b]))


@pytest.mark.parametrize("d", dt.ALL, ids=_name)
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
def test_scalar_promotion_matches_torch_result_type(d, scalar):
    want = torch.result_type(torch.zeros(2, dtype=TORCH[d]), scalar)
    assert dt.promote_scalar(d, scalar) == dt.dtype_of(want)


@pytest.mark.parametrize("a,b", itertools.product(SCALARS, repeat=2))
def test_result_type_of_two_scalars(a, b):
    assert F.result_type(a, b) == dt.dtype_of(torch.result_type(torch.tensor(a), b))


def test_dtype_of_accepts_torch_numpy_python_and_names():
    for d, t in TORCH.items():
        assert dt.dtype_of(t) == d
        assert dt.dtype_of(d.name) == d
        assert dt.dtype_of(d.np) == d
    assert (dt.dtype_of(float), dt.dtype_of(int), dt.dtype_of(bool)) == (dt.float32, dt.int64, dt.bool_)
    with pytest.raises(dt.DTypeError, match="float64"):
        dt.dtype_of(np.float64)


def _graph_dtype(fn, *dtypes):
    g = lm.Graph()
    xs = [g.input(f"x{k}", (2,), dtype=d) for k, d in enumerate(dtypes)]
    return fn(*xs).dtype


BINARY = ["add", "mul", "div", "maximum", "minimum", "eq", "lt"]


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_recorded_ops_follow_torch(a, b):
    """The dtype each recorded op produces equals torch's for the same operand dtypes."""
    ta, tb = torch.ones(2, dtype=TORCH[a]), torch.ones(2, dtype=TORCH[b])
    for name in BINARY:
        want = getattr(torch, name)(ta, tb).dtype
        assert _graph_dtype(getattr(F, name), a, b) == dt.dtype_of(want), f"{name}({a.name}, {b.name})"
    want = torch.where(torch.ones(2, dtype=torch.bool), ta, tb).dtype
    assert _graph_dtype(lambda c, x, y: F.where(c, x, y), dt.bool_, a, b) == dt.dtype_of(want)


@pytest.mark.parametrize("d", dt.ALL, ids=_name)
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
def test_recorded_ops_with_scalars_follow_torch(d, scalar):
    t = torch.ones(2, dtype=TORCH[d])
    assert _graph_dtype(lambda x: x * scalar, d) == dt.dtype_of((t * scalar).dtype)
    assert _graph_dtype(lambda x: scalar + x, d) == dt.dtype_of((scalar + t).dtype)
    assert _graph_dtype(lambda x: x / scalar, d) == dt.dtype_of((t / scalar).dtype)
    assert _graph_dtype(lambda x: x < scalar, d) == dt.bool_


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_zero_dim_tensors_promote_like_torch(a, b):
    """A 0-dim tensor only decides the dtype when its category is higher (torch's three-tier rule)."""
    zero, full = torch.ones((), dtype=TORCH[a]), torch.ones(3, dtype=TORCH[b])
    for name in ("add", "mul", "maximum", "where"):
        g = lm.Graph()
        z, f = g.input("z", (), dtype=a), g.input("f", (3,), dtype=b)
        if name == "where":
            cond = g.input("c", (3,), dtype=lm.bool_)
            got = F.where(cond, z, f).dtype
            want = torch.where(torch.ones(3, dtype=torch.bool), zero, full).dtype
        else:
            got = getattr(F, name)(z, f).dtype
            want = getattr(torch, name)(zero, full).dtype
        assert got == dt.dtype_of(want), f"{name}(0-dim {a.name}, {b.name}[3])"
