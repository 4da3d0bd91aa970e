"""Comparisons, logic, where, minimum/maximum/clamp and nan/inf tests against PyTorch."""

import operator
from operator import methodcaller

import numpy as np
import pytest
import torch

import luminal as lm
import luminal.functional as F
from tests.opcheck import check

COMPARISONS = ["eq", "ne", "lt", "le", "gt", "ge"]
OPERATORS = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
# Every ordered pair of these, nan and the infinities included, is compared.
EDGE = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3.5], np.float32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "int64", "bool"])
def test_comparisons_broadcast(dtype):
    # a narrow integer range makes ties frequent, so equality is exercised
    kw = {"shapes": [(4, 5), (5,)], "dtype": dtype, "low": -2, "high": 2}
    check("eq", operator.eq, operator.eq, **kw)
    check("ne", operator.ne, operator.ne, **kw)
    check("lt", operator.lt, operator.lt, **kw)
    check("le", operator.le, operator.le, **kw)
    check("gt", operator.gt, operator.gt, **kw)
    check("ge", operator.ge, operator.ge, **kw)
    kw["shapes"] = [(3, 1, 4), (2, 1)]
    check("eq", torch.eq, lambda a, b: a.eq(b), **kw)
    check("ne", torch.ne, lambda a, b: a.ne(b), **kw)
    check("lt", torch.lt, lambda a, b: a.lt(b), **kw)
    check("le", torch.le, F.le, **kw)
    check("gt", torch.gt, F.gt, **kw)
    check("ge", torch.ge, F.ge, **kw)


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparisons_with_nan_and_inf(name):
    a = np.repeat(EDGE, len(EDGE))
    b = np.tile(EDGE, len(EDGE))
    check(name, OPERATORS[name], OPERATORS[name], inputs=[a, b])
    check(name, OPERATORS[name], OPERATORS[name], inputs=[a.astype(np.float16), b.astype(np.float16)])


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparisons_with_scalars(name):
    op = OPERATORS[name]
    check(name, lambda a: op(a, 1), lambda a: op(a, 1), shapes=[(4, 5)], dtype="int32", low=-2, high=2)
    check(name, lambda a: op(a, 0.5), lambda a: op(a, 0.5), shapes=[(4, 5)], dtype="int64", low=-2, high=2)
    check(name, lambda a: op(2.0, a), lambda a: op(2.0, a), shapes=[(4, 5)], low=-4, high=4)  # reflected
    check(name, lambda a: op(a, True), lambda a: op(a, True), shapes=[(4, 5)], dtype="bool")
    check(name, lambda a, b: op(a, b), lambda a, b: op(a, b), shapes=[(4, 5), (4, 5)], dtype="float16", low=-1, high=1)


def test_mixed_dtype_comparison():
    i = np.array([[1, 2, 3, 4]], np.int32).repeat(2, 0)
    f = np.array([[1.0, 2.5, 3.0, -4.0]], np.float32).repeat(2, 0)
    check("eq", torch.eq, lambda a, b: a == b, inputs=[i, f])
    check("lt", torch.lt, lambda a, b: a < b, inputs=[i, f.astype(np.float16)])


def test_tensor_stays_hashable():
    g = lm.Graph()
    x = g.input("x", (2,))
    assert len({x, x, g.input("y", (2,))}) == 2
    assert isinstance(x == x, lm.Tensor)


# ---- logic ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bool", "float32", "int32"])
def test_logical_ops(dtype):
    shapes = [(4, 5), (5,)]
    check("logical_and", torch.logical_and, F.logical_and, shapes=shapes, dtype=dtype, low=-1, high=1)
    check("logical_or", torch.logical_or, lambda a, b: a.logical_or(b), shapes=shapes, dtype=dtype, low=-1, high=1)
    check("logical_xor", torch.logical_xor, F.logical_xor, shapes=shapes, dtype=dtype, low=-1, high=1)
    check("logical_not", torch.logical_not, lambda a: a.logical_not(), shapes=[(4, 5)], dtype=dtype, low=-1, high=1)
    nan = np.array([np.nan, 0.0, -0.0, np.inf], np.float32)
    check("logical_not", torch.logical_not, F.logical_not, inputs=[nan])  # nan is true
    check("logical_and", torch.logical_and, F.logical_and, inputs=[nan, nan[::-1].copy()])


def test_bool_operators():
    shapes = [(4, 5), (4, 1)]
    check("bitwise_and", operator.and_, operator.and_, shapes=shapes, dtype="bool")
    check("bitwise_or", operator.or_, operator.or_, shapes=shapes, dtype="bool")
    check("bitwise_xor", operator.xor, operator.xor, shapes=shapes, dtype="bool")
    check("bitwise_not", operator.invert, operator.invert, shapes=[(4, 5)], dtype="bool")
    check("bitwise_and", lambda a: True & a, lambda a: True & a, shapes=[(4, 5)], dtype="bool")
    check("bitwise_xor", lambda a: a ^ False, lambda a: a ^ False, shapes=[(4, 5)], dtype="bool")


def test_integer_bitwise_ops_raise_clearly():
    g = lm.Graph()
    i = g.input("i", (3,), dtype=lm.int32)
    b = g.input("b", (3,), dtype=lm.bool)
    for fn in (lambda: i & i, lambda: i | b, lambda: i ^ 1, lambda: ~i, lambda: b & 1):
        with pytest.raises(lm.DTypeError, match="bool tensors only"):
            fn()


# ---- where -------------------------------------------------------------------------------------------


def _mask(shape, seed=3):
    return np.random.default_rng(seed).random(shape) < 0.5


def test_where_broadcast_and_promotion():
    c = _mask((4, 5))
    check("where", torch.where, F.where, inputs=[c, np.ones((4, 1), np.float32) * 3, np.arange(5, dtype=np.float32)])
    check(
        "where",
        torch.where,
        F.where,
        inputs=[
            c[:1].copy(),
            np.arange(20, dtype=np.int32).reshape(4, 5),
            np.float16(-1.5) * np.ones((4, 5), np.float16),
        ],
    )
    check("where", torch.where, F.where, inputs=[c, np.ones((4, 5), np.int64), np.zeros((4, 5), np.int32)])
    check("where", torch.where, F.where, inputs=[c, c[::-1].copy(), np.zeros((4, 5), bool)])
    check(
        "where", lambda c, a: a.where(c, -1.0), lambda c, a: a.where(c, -1.0), inputs=[c, np.ones((4, 5), np.float32)]
    )


def test_where_with_scalars():
    c = _mask((4, 5))
    x16 = np.linspace(-1, 1, 20, dtype=np.float16).reshape(4, 5)
    check("where", lambda c: torch.where(c, 1, 2.5), lambda c: F.where(c, 1, 2.5), inputs=[c])  # float32
    check("where", lambda c: torch.where(c, 1, 2), lambda c: F.where(c, 1, 2), inputs=[c])  # int64
    check("where", lambda c: torch.where(c, True, False), lambda c: F.where(c, True, False), inputs=[c])
    check("where", lambda c, a: torch.where(c, a, 2.5), lambda c, a: F.where(c, a, 2.5), inputs=[c, x16])  # stays f16
    check(
        "where", lambda c, a: torch.where(c, 7, a), lambda c, a: F.where(c, 7, a), inputs=[c, np.ones((4, 5), np.int32)]
    )


def test_where_keeps_unselected_infinities_and_nans_out():
    scores = np.array([[1.0, np.nan, 3.0, np.inf, -2.0]], np.float32).repeat(3, 0)
    mask = np.array([[True, False, True, False, True]]).repeat(3, 0)
    check("where", lambda m, s: torch.where(m, s, -np.inf), lambda m, s: F.where(m, s, -np.inf), inputs=[mask, scores])
    check("where", lambda m, s: torch.where(m, -np.inf, s), lambda m, s: F.where(m, -np.inf, s), inputs=[~mask, scores])


# ---- minimum, maximum, clamp -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int64", "bool"])
def test_minimum_maximum(dtype):
    check("maximum", torch.maximum, F.maximum, shapes=[(4, 5), (5,)], dtype=dtype, low=-9, high=9)
    check("minimum", torch.minimum, lambda a, b: a.minimum(b), shapes=[(3, 1, 5), (4, 1)], dtype=dtype, low=-9, high=9)


def test_minimum_maximum_nan_inf_and_int_extremes():
    a, b = np.repeat(EDGE, len(EDGE)), np.tile(EDGE, len(EDGE))
    check("maximum", torch.maximum, F.maximum, inputs=[a, b])
    check("minimum", torch.minimum, F.minimum, inputs=[a, b])
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    ints = np.array([lo, hi, 0, -1, lo, hi], np.int32), np.array([hi, lo, lo, hi, lo, 0], np.int32)
    check("maximum", torch.maximum, F.maximum, inputs=list(ints))
    check("minimum", torch.minimum, F.minimum, inputs=list(ints))


def test_clamp_variants():
    check("clamp", lambda x: x.clamp(-0.5, 0.7), lambda x: x.clamp(-0.5, 0.7), shapes=[(4, 5)])
    check("clamp", lambda x: torch.clamp(x, min=0.2), lambda x: F.clamp(x, min=0.2), shapes=[(4, 5)], dtype="float16")
    check(
        "clamp", lambda x: torch.clamp(x, max=-0.2), lambda x: F.clamp(x, max=-0.2), shapes=[(4, 5)], dtype="bfloat16"
    )
    check("clamp", lambda x: x.clamp(1, 0), lambda x: x.clamp(1, 0), shapes=[(4, 5)])  # min > max gives max
    check("clamp", torch.clamp, F.clamp, shapes=[(4, 5), (5,), (4, 1)], low=-2, high=2)  # tensor bounds
    check("clip", lambda x: x.clip(-3, 4), lambda x: x.clip(-3, 4), shapes=[(4, 5)], dtype="int32", low=-9, high=9)
    check(
        "clamp", lambda x: x.clamp(0.5), lambda x: x.clamp(0.5), shapes=[(4, 5)], dtype="int64", low=-3, high=3
    )  # -> f32
    check(
        "clamp",
        lambda x, m: x.clamp(min=m),
        lambda x, m: x.clamp(min=m),
        shapes=[(4, 5), (5,)],
        dtype="int32",
        low=-3,
        high=3,
    )
    nan = np.array([np.nan, 1.0, -5.0, np.inf, -np.inf], np.float32)
    check("clamp", lambda x: x.clamp(-1, 2), lambda x: x.clamp(-1, 2), inputs=[nan])
    check("clamp", lambda x: x.clamp(float("nan"), 2), lambda x: x.clamp(float("nan"), 2), inputs=[nan])


def test_clamp_errors():
    g = lm.Graph()
    x, b = g.input("x", (2,)), g.input("b", (2,), dtype=lm.bool)
    with pytest.raises(ValueError, match="min and max"):
        x.clamp()
    with pytest.raises(lm.DTypeError, match="bool"):
        b.clamp(0, 1)
    with pytest.raises(lm.ShapeError, match=r"maximum.*\(2,\).*\(3,\)"):
        F.maximum(x, g.input("y", (3,)))
    with pytest.raises(lm.DTypeError, match="condition must be a bool"):
        F.where(x, x, x)
    with pytest.raises(TypeError, match="data-dependent"):
        F.where(b)


# ---- nan and inf tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_nan_inf_tests(dtype):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 3.0e4], np.float32).astype(lm.dtypes.dtype_of(dtype).np)
    for name in ("isnan", "isinf", "isfinite", "nan_to_num"):
        check(name, getattr(torch, name), methodcaller(name), inputs=[x])
    check(
        "nan_to_num",
        lambda a: torch.nan_to_num(a, 1.0, 2.0, -3.0),
        lambda a: F.nan_to_num(a, 1.0, 2.0, -3.0),
        inputs=[x],
    )
    check("nan_to_num", lambda a: a.nan_to_num(posinf=9.0), lambda a: a.nan_to_num(posinf=9.0), inputs=[x])


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_nan_inf_tests_on_integers(dtype):
    for name in ("isnan", "isinf", "isfinite", "nan_to_num"):
        check(name, getattr(torch, name), methodcaller(name), shapes=[(3, 4)], dtype=dtype)
