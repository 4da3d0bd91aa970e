"""Reductions and scans against PyTorch: dims (int, tuple, negative, None), keepdim, dtype=, int/bool/half
inputs, non-contiguous and symbolic-leading-dim variants (run by `check`), and the errors."""

import math
from operator import methodcaller

import numpy as np
import pytest
import torch

import luminal as lm
from luminal import functional as F
from tests.opcheck import check

DIMS = [None, 0, -1, (0, 2), (-1, 1), (0, 1, 2)]  # over a rank-3 input
SHAPE3 = (5, 3, 4)


def _ties(shape, seed=0, dtype=np.float32):
    """Few distinct values, so extremes repeat and first-index semantics matter."""
    return np.round(np.random.default_rng(seed).uniform(-2, 2, size=shape)).astype(dtype)


def _with_nans(shape, seed=0):
    a = np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)
    a[np.random.default_rng(seed + 1).random(shape) < 0.3] = np.nan
    return a


# ---- sum / mean / nansum / nanmean ---------------------------------------------------------------------


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_dims(dim, keepdim):
    check("sum", lambda a: a.sum(dim, keepdim=keepdim), lambda a: a.sum(dim, keepdim=keepdim), [SHAPE3], reduction=True)
    check("mean", lambda a: a.mean(dim, keepdim), lambda a: a.mean(dim, keepdim), [SHAPE3], reduction=True)


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_sum_integer_and_bool_promote_to_int64(dtype):
    check("sum", lambda a: a.sum(), lambda a: a.sum(), [(6, 7)], dtype=dtype, low=-50, high=50)
    check("sum", lambda a: a.sum(1, True), lambda a: a.sum(1, True), [(6, 7)], dtype=dtype, low=-50, high=50)


def test_sum_mean_dtype_and_half():
    check("sum", lambda a: a.sum(0, dtype=torch.float32), lambda a: a.sum(0, dtype=lm.float32), [(9, 4)], dtype="int32")
    check("mean", lambda a: a.mean(dtype=torch.float32), lambda a: a.mean(dtype=lm.float32), [(9, 4)], dtype="int64")
    check("mean", lambda a: a.mean(-1), lambda a: a.mean(-1), [(6, 300)], dtype="float16", reduction=True)
    check("sum", lambda a: a.sum((0, 1)), lambda a: a.sum((0, 1)), [(6, 50)], dtype="float16", reduction=True)
    check("mean", lambda a: a.mean(1, True), lambda a: a.mean(1, True), [(6, 50)], dtype="bfloat16", reduction=True)


def test_sum_mean_many_float32_values():
    check("sum", lambda a: a.sum(1), lambda a: a.sum(1), [(3, 20000)], reduction=True)
    check("mean", lambda a: a.mean(0), lambda a: a.mean(0), [(4096, 3)], reduction=True)


def test_mean_rejects_integers():
    g = lm.Graph()
    with pytest.raises(lm.DTypeError, match="mean"):
        g.input("x", (3,), dtype=lm.int64).mean()


@pytest.mark.parametrize("dim", [None, 1, (0, -1)])
def test_nansum_nanmean(dim):
    x = [_with_nans((6, 5, 4))]
    check("nansum", lambda a: a.nansum(dim), lambda a: a.nansum(dim), inputs=x, reduction=True)
    check("nanmean", lambda a: a.nanmean(dim, True), lambda a: a.nanmean(dim, True), inputs=x, reduction=True)


def test_nansum_of_ints_is_sum():
    check("nansum", lambda a: a.nansum(0), lambda a: a.nansum(0), [(5, 3)], dtype="int32", low=-9, high=9)


# ---- var / std -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(dim, keepdim):
    check("var", lambda a: a.var(dim, keepdim=keepdim), lambda a: a.var(dim, keepdim=keepdim), [SHAPE3], reduction=True)
    check("std", lambda a: a.std(dim, keepdim=keepdim), lambda a: a.std(dim, keepdim=keepdim), [SHAPE3], reduction=True)


@pytest.mark.parametrize("correction", [0, 1, 2, 0.5])
def test_var_correction(correction):
    def fn(a):
        return a.var(0, correction=correction)

    check("var", fn, fn, [(6, 7)], reduction=True)
    check(
        "std",
        lambda a: a.std((0, 1), correction=correction),
        lambda a: a.std((0, 1), correction=correction),
        [(4, 3)],
        reduction=True,
    )


def test_var_unbiased_positional_and_half():
    check("var", lambda a: a.var(1, False, True), lambda a: a.var(1, False, True), [(5, 8)], reduction=True)
    check("var", lambda a: a.var(False), lambda a: a.var(False), [(5, 8)], reduction=True)
    check("std", lambda a: a.std(-1), lambda a: a.std(-1), [(4, 64)], dtype="float16", reduction=True)


def test_var_mean_std_mean():
    check("var_mean", lambda a: torch.var_mean(a, 1), lambda a: F.var_mean(a, 1), [(6, 5)], reduction=True)
    check(
        "std_mean",
        lambda a: torch.std_mean(a, (0, 1), keepdim=True, correction=0),
        lambda a: F.std_mean(a, (0, 1), keepdim=True, correction=0),
        [(6, 5)],
        reduction=True,
    )


# ---- logsumexp ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, -1, (0, 1)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(dim, keepdim):
    def fn(a):
        return a.logsumexp(dim, keepdim)

    check("logsumexp", fn, fn, [(6, 7)], reduction=True)
    check("logsumexp", fn, fn, [(6, 7)], low=80, high=120, reduction=True)  # exp would overflow without the shift


def test_logsumexp_infinities_ints_and_half():
    inf = math.inf
    x = np.array([[1.0, -inf, 2.0], [-inf, -inf, -inf], [inf, 0.0, 1.0], [inf, -inf, 3.0]], np.float32)
    check("logsumexp", lambda a: a.logsumexp(1), lambda a: a.logsumexp(1), inputs=[x], reduction=True)
    check("logsumexp", lambda a: a.logsumexp(0), lambda a: a.logsumexp(0), [(5, 4)], dtype="int32", reduction=True)
    check("logsumexp", lambda a: a.logsumexp(-1), lambda a: a.logsumexp(-1), [(3, 40)], dtype="float16")


# ---- amax / amin / max / min / argmax / argmin ---------------------------------------------------------


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "bool", "float16"])
def test_amax_amin(dim, dtype):
    check("amax", lambda a: a.amax(dim), lambda a: a.amax(dim), [SHAPE3], dtype=dtype, low=-9, high=9)
    check("amin", lambda a: a.amin(dim, True), lambda a: a.amin(dim, True), [SHAPE3], dtype=dtype, low=-9, high=9)


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_max_min_value_form(dtype):
    check("max", lambda a: a.max(), lambda a: a.max(), [(4, 6)], dtype=dtype, low=-9, high=9)
    check("min", lambda a: a.min(), lambda a: a.min(), [(4, 6)], dtype=dtype, low=-9, high=9)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim_form_with_ties(dim, keepdim):
    x = [_ties((6, 7, 5))]
    check("max", lambda a: tuple(a.max(dim, keepdim)), lambda a: tuple(a.max(dim, keepdim)), inputs=x)
    check("min", lambda a: tuple(a.min(dim, keepdim)), lambda a: tuple(a.min(dim, keepdim)), inputs=x)
    xi = [_ties((6, 7, 5), seed=3, dtype=np.int32)]
    check("max", lambda a: tuple(torch.max(a, dim)), lambda a: tuple(F.max(a, dim)), inputs=xi)
    xb = [np.random.default_rng(4).random((6, 7, 5)) < 0.5]
    check("min", lambda a: tuple(a.min(dim, keepdim)), lambda a: tuple(a.min(dim, keepdim)), inputs=xb)


def test_max_dim_returns_values_and_indices():
    g = lm.Graph()
    r = g.input("x", (3, 4)).max(1)
    assert isinstance(r, tuple) and r.values is r[0] and r.indices is r[1]
    assert r.values.dtype == lm.float32 and r.indices.dtype == lm.int64 and r.indices.shape == (3,)


def test_max_min_other_tensor_is_elementwise():
    check("max", lambda a, b: a.max(b), lambda a, b: a.max(b), [(4, 5), (5,)])
    check("min", lambda a, b: torch.min(a, b), lambda a, b: F.min(a, b), [(4, 5), (4, 1)])
    check("max", lambda a, b: a.max(b), lambda a, b: a.max(b), [(4, 5), (4, 5)], dtype="int32", low=-9, high=9)
    nan = [np.array([[1.0, np.nan], [np.inf, -np.inf]], np.float32), np.array([[np.nan, 0], [2, 3]], np.float32)]
    check("max", lambda a, b: a.max(b), lambda a, b: a.max(b), inputs=nan)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin_first_index_of_ties(dim, keepdim):
    for seed in range(3):
        x = [_ties((7, 6, 5), seed)]
        check("argmax", lambda a: a.argmax(dim, keepdim), lambda a: a.argmax(dim, keepdim), inputs=x)
        check("argmin", lambda a: a.argmin(dim, keepdim), lambda a: a.argmin(dim, keepdim), inputs=x)


def test_argmax_argmin_ints_half_and_nan():
    check("argmax", lambda a: a.argmax(0), lambda a: a.argmax(0), [(9, 4)], dtype="int64", low=-2, high=2)
    check("argmin", lambda a: a.argmin(1), lambda a: a.argmin(1), [(9, 4)], dtype="int32", low=-2, high=2)
    check("argmax", lambda a: a.argmax(-1), lambda a: a.argmax(-1), inputs=[_ties((5, 8), 2, np.float16)])
    x = [np.array([[1, np.nan, 5, np.nan], [3, 3, -1, 0], [-np.inf, -np.inf, np.inf, np.inf]], np.float32)]
    check("argmax", lambda a: a.argmax(1), lambda a: a.argmax(1), inputs=x)
    check("argmin", lambda a: a.argmin(1), lambda a: a.argmin(1), inputs=x)


# ---- all / any / count_nonzero / norm ------------------------------------------------------------------


@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
def test_all_any(dim, dtype):
    # values in {-1, 0, 1} so the int and float inputs hold zeros
    check("all", lambda a: a.all(dim), lambda a: a.all(dim), [SHAPE3], dtype=dtype, low=-1, high=1)
    check("any", lambda a: a.any(dim, True), lambda a: a.any(dim, True), [SHAPE3], dtype=dtype, low=-1, high=1)
    xb = [np.random.default_rng(1).random(SHAPE3) < 0.9]  # mostly true, so `all` is sometimes true
    check("all", lambda a: a.all(dim), lambda a: a.all(dim), inputs=xb)


@pytest.mark.parametrize("dtype", ["bool", "float32"])
def test_reductions_over_an_empty_axis_give_their_identity(dtype):
    # any() of nothing is False and all() is True, as in torch: not the cast of an empty max
    empty = [np.zeros((3, 0), dtype)]
    for name in ("any", "all", "sum", "count_nonzero"):
        check(name, methodcaller(name, 1), methodcaller(name, 1), inputs=empty)
    check("all", methodcaller("all"), methodcaller("all"), inputs=empty)
    check("any", methodcaller("any", 1, True), methodcaller("any", 1, True), inputs=empty)


@pytest.mark.parametrize("dim", [None, 1, (0, -1)])
def test_count_nonzero(dim):
    def fn(a):
        return a.count_nonzero(dim)

    check("count_nonzero", fn, fn, [SHAPE3], dtype="int64", low=-1, high=1)
    check("count_nonzero", fn, fn, [SHAPE3], dtype="bool")
    check("count_nonzero", fn, fn, inputs=[np.round(_with_nans(SHAPE3))])  # nan != 0 counts


@pytest.mark.parametrize("p", ["fro", 2, 1, math.inf, -math.inf, 0, 3, 0.5])
@pytest.mark.parametrize("dim", [None, 1, (0, 1)])
def test_norm(p, dim):
    def fn(a):
        return a.norm(p, dim, keepdim=dim == 1)

    x = [np.round(np.random.default_rng(0).uniform(-3, 3, (6, 5)), 1).astype(np.float32)]  # with some zeros
    check("norm", fn, fn, inputs=x, reduction=True)


def test_norm_half_and_dtype():
    check("norm", lambda a: a.norm(dim=-1), lambda a: a.norm(dim=-1), [(4, 30)], dtype="float16")
    check(
        "norm",
        lambda a: a.norm(1, dtype=torch.float32),
        lambda a: a.norm(1, dtype=lm.float32),
        [(4, 3)],
        dtype="float16",
    )


# ---- prod / cumsum / cumprod --------------------------------------------------------------------------


@pytest.mark.parametrize("shape,dim", [((5, 3), 0), ((4, 7), 1), ((6, 1, 3), -2), ((9, 8), -1), ((11, 2), None)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod_exact_on_ints_with_zeros_and_signs(shape, dim, keepdim):
    def fn(a):
        return a.prod(dim, keepdim) if dim is not None else a.prod()

    check("prod", fn, fn, [shape], dtype="int64", low=-3, high=3, seed=1)
    check("prod", fn, fn, [shape], dtype="int32", low=-2, high=2, seed=2)
    check("prod", fn, fn, [shape], low=-1.5, high=1.5, reduction=True)


def test_prod_bool_half_and_dtype():
    check("prod", lambda a: a.prod(1), lambda a: a.prod(1), [(7, 5)], dtype="bool")
    check("prod", lambda a: a.prod(0), lambda a: a.prod(0), [(7, 5)], dtype="float16", low=0.5, high=1.5)
    check(
        "prod",
        lambda a: a.prod(0, dtype=torch.float32),
        lambda a: a.prod(0, dtype=lm.float32),
        [(7, 5)],
        dtype="int32",
        low=-3,
        high=3,
    )


@pytest.mark.parametrize("shape,dim", [((1,), 0), ((8,), 0), ((5, 7), 0), ((5, 7), 1), ((3, 13, 2), -2), ((33, 2), 0)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "bool"])
def test_cumsum(shape, dim, dtype):
    check("cumsum", lambda a: a.cumsum(dim), lambda a: a.cumsum(dim), [shape], dtype=dtype, low=-9, high=9)


def test_cumsum_dtype_and_half():
    check(
        "cumsum",
        lambda a: a.cumsum(1, dtype=torch.float32),
        lambda a: a.cumsum(1, dtype=lm.float32),
        [(4, 9)],
        dtype="int32",
    )
    check(
        "cumsum",
        lambda a: torch.cumsum(a, 0, dtype=torch.int32),
        lambda a: F.cumsum(a, 0, dtype="int32"),
        [(6, 3)],
        dtype="bool",
    )
    check("cumsum", lambda a: a.cumsum(-1), lambda a: a.cumsum(-1), [(3, 100)], dtype="float16", low=0, high=1)


@pytest.mark.parametrize("shape,dim", [((6, 5), 0), ((4, 9), -1), ((3, 11, 2), 1)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_cumprod(shape, dim, dtype):
    low, high = (-1.5, 1.5) if dtype == "float32" else (-2, 2)
    check("cumprod", lambda a: a.cumprod(dim), lambda a: a.cumprod(dim), [shape], dtype=dtype, low=low, high=high)


# ---- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op,call",
    [
        ("sum", lambda x: x.sum(3)),
        ("mean", lambda x: x.mean((0, -4))),
        ("var", lambda x: x.var(5)),
        ("amax", lambda x: x.amax(-4)),
        ("amin", lambda x: x.amin(3)),
        ("max", lambda x: x.max(3)),
        ("min", lambda x: x.min(-5, True)),
        ("argmax", lambda x: x.argmax(3)),
        ("argmin", lambda x: x.argmin(-4)),
        ("prod", lambda x: x.prod(4)),
        ("cumsum", lambda x: x.cumsum(3)),
        ("cumprod", lambda x: x.cumprod(-4)),
        ("logsumexp", lambda x: x.logsumexp(3)),
        ("all", lambda x: x.all(7)),
        ("any", lambda x: x.any((0, 9))),
        ("count_nonzero", lambda x: x.count_nonzero(3)),
        ("norm", lambda x: x.norm(2, 3)),
        ("nansum", lambda x: x.nansum(3)),
    ],
)
def test_bad_dim_names_op_and_shape(op, call):
    x = lm.Graph().input("x", (lm.sym("b"), 3, 4))
    with pytest.raises(lm.ShapeError, match=rf"^{op}: dim .* out of range for shape \(b, 3, 4\)"):
        call(x)


def test_other_errors():
    x = lm.Graph().input("x", (2, 3))
    with pytest.raises(lm.ShapeError, match=r"sum: dim \[1, -1\] repeats an axis of shape \(2, 3\)"):
        x.sum((1, -1))
    with pytest.raises(TypeError, match="max: dim must be an int"):
        x.max((0, 1))
    with pytest.raises(lm.DTypeError, match="argmax: does not support bool"):
        x.bool().argmax()
    with pytest.raises(lm.DTypeError, match="var"):
        x.long().var()
    with pytest.raises(ValueError, match="norm: p='nuc'"):
        x.norm("nuc")
    with pytest.raises(TypeError, match="var: give either"):
        x.var(0, True, correction=1)
