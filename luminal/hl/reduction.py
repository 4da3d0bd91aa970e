"""Reductions and scans over any dims, with keepdim and dtype=, following torch's signatures and semantics.

Every op is a composition of primitives: sums and maxima reduce one axis at a time (SumReduce, MaxReduce),
minima are negated maxima, products and prefix scans are log-depth trees built from views (slice / pad), and
arg-reductions pick the first extreme index from an Iota. Half-precision inputs compute in float32 and round
once at the end, as PyTorch's CPU kernels accumulate.
"""

from __future__ import annotations

import builtins
import math
from typing import Any, Callable, NamedTuple, Sequence

from luminal import dtypes as dt
from luminal.dtypes import DTypeError
from luminal.hl import comparison as C
from luminal.hl import elementwise as E
from luminal.hl import prim
from luminal.symbolic import Dim, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, dims_product, format_shape, idx

Dims = int | Sequence[int] | None


class ValuesIndices(NamedTuple):
    """What `x.max(dim)` / `x.min(dim)` return, like torch.return_types.max: `.values` and `.indices`."""

    values: Tensor
    indices: Tensor


def normalize_dims(x: Tensor, dim: Dims, op: str) -> list[int]:
    """Sorted, non-negative, de-duplicated reduction axes (None means all)."""
    if dim is None:
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    rank = builtins.max(x.ndim, 1)  # a 0-dim tensor accepts dim 0 and -1, as in torch
    out = []
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int) or not -rank <= d < rank:
            raise ShapeError(f"{op}: dim {d} is out of range for shape {format_shape(x.shape)}")
        out.append(d % rank)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: dim {dims} repeats an axis of shape {format_shape(x.shape)}")
    return sorted(out)


def _one_dim(x: Tensor, dim: Any, op: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, got {dim!r}")
    return normalize_dims(x, dim, op)[0]


def _reduce(x: Tensor, dims: list[int], keepdim: bool, reducer: Callable[[Tensor, int], Tensor]) -> Tensor:
    out = x
    for d in reversed(dims):  # from the last axis so earlier axis numbers stay valid
        if d < out.ndim:
            out = reducer(out, d)
    if keepdim:
        shape = list(x.shape)
        for d in dims:
            if d < len(shape):
                shape[d] = 1
        out = out.with_view(out.st.reshape(shape))
    return out


# ---- small exact helpers -------------------------------------------------------------------------------


def _widen(x: Tensor) -> tuple[Tensor, dt.DType]:
    """Half types compute in float32 and are rounded back once (torch's CPU accumulation type)."""
    return (prim.cast(x, dt.float32), x.dtype) if x.dtype in (dt.float16, dt.bfloat16) else (x, x.dtype)


def _require_float(x: Tensor, op: str) -> None:
    if not x.dtype.is_float:
        raise DTypeError(f"{op}: needs a floating-point input (or dtype=), got {x.dtype.name}")


def _count(x: Tensor, dims: list[int]) -> Dim:
    return as_dim(dims_product([x.shape[d] for d in dims if d < x.ndim]))


def _size(graph, n: Dim, dtype: dt.DType) -> Tensor:
    """A scalar tensor holding the (possibly symbolic) size n: an Iota when n is known only at run time."""
    return prim.scalar(graph, n, dtype) if isinstance(n, int) else prim.cast(prim.iota(graph, n, ()), dtype)


def _pad_axis(x: Tensor, axis: int, before: Dim, after: Dim, fill: int = 0) -> Tensor:
    """Pad one axis; padding reads zero, and a nonzero fill adds a constant block over exactly the padding."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (before, after)
    out = x.with_view(x.st.pad(widths))
    n = x.shape[axis]
    for size, lead, trail in ((before, 0, n + after), (after, n + before, 0)):
        if fill and not (isinstance(size, int) and size == 0):
            shape = list(x.shape)
            shape[axis] = size
            block = prim.scalar(x.graph, fill, x.dtype, shape)
            widths[axis] = (lead, trail)
            out = prim.add(out, block.with_view(block.st.pad(widths)))  # v + 0 = v; 0 + fill = fill
    return out


def _slice_axis(x: Tensor, axis: int, start: Dim, stop: Dim, step: int) -> Tensor:
    bounds = [(0, d, 1) for d in x.shape]
    bounds[axis] = (start, stop, step)
    return x.with_view(x.st.slice(bounds))


def _drop_axis(x: Tensor, axis: int) -> Tensor:
    """Remove an axis of run-time size 1: a view when that is known, else a one-element (exact) SumReduce."""
    if x.shape[axis] == 1:
        return x.with_view(x.st.reshape([d for k, d in enumerate(x.shape) if k != axis]))
    return prim.sum_reduce(x, axis)


# ---- sums and means ------------------------------------------------------------------------------------


def sum(x: Tensor, dim: Dims = None, keepdim: bool = False, dtype=None) -> Tensor:  # noqa: A001
    """Sum; bool and integer inputs accumulate as int64, as in torch."""
    if dtype is not None:
        x = prim.cast(x, dtype)
    elif not x.dtype.is_float:
        x = prim.cast(x, dt.int64)
    return _reduce(x, normalize_dims(x, dim, "sum"), keepdim, prim.sum_reduce)


def mean(x: Tensor, dim: Dims = None, keepdim: bool = False, *, dtype=None) -> Tensor:
    x = prim.cast(x, dtype) if dtype is not None else x
    _require_float(x, "mean")
    dims = normalize_dims(x, dim, "mean")
    wide, back = _widen(x)
    return prim.cast(E.div(sum(wide, dims, keepdim), _count_value(x, dims)), back)  # sum / n


def _count_value(x: Tensor, dims: list[int]) -> int | Tensor:
    n = _count(x, dims)
    return n if isinstance(n, int) else _size(x.graph, n, dt.int64)


def nansum(x: Tensor, dim: Dims = None, keepdim: bool = False, *, dtype=None) -> Tensor:
    x = prim.cast(x, dtype) if dtype is not None else x
    if x.dtype.is_float:
        x = C.where(C.isnan(x), prim.full_like(x, 0), x)  # nan counts as zero
    return sum(x, normalize_dims(x, dim, "nansum"), keepdim)


def nanmean(x: Tensor, dim: Dims = None, keepdim: bool = False, *, dtype=None) -> Tensor:
    x = prim.cast(x, dtype) if dtype is not None else x
    _require_float(x, "nanmean")
    dims = normalize_dims(x, dim, "nanmean")
    wide, back = _widen(x)
    present = sum(C.logical_not(C.isnan(wide)), dims, keepdim)  # int64 count of the non-nan entries
    return prim.cast(E.div(nansum(wide, dims, keepdim), present), back)


def _var_mean(x: Tensor, dim: Any, unbiased: bool | None, keepdim: bool, correction, op: str):
    if isinstance(dim, bool):  # torch.var(x, True): the second positional argument is `unbiased`
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(f"{op}: give either unbiased or correction, not both")
    c = correction if correction is not None else (0 if unbiased is False else 1)
    _require_float(x, op)
    dims = normalize_dims(x, dim, op)
    wide, back = _widen(x)
    mu = mean(wide, dims, keepdim=True)
    d = E.sub(wide, mu)
    ss = sum(E.mul(d, d), dims, keepdim)
    n = _count(x, dims)
    if isinstance(n, int):
        dof: Any = builtins.max(n - c, 0)
    elif float(c).is_integer():
        dof = _size(x.graph, as_expr(n - int(c)).max(0), dt.float32)
    else:
        dof = C.maximum(E.sub(_size(x.graph, n, dt.float32), c), 0.0)
    var_ = E.div(ss, dof)  # sum((x - mean)^2) / max(n - correction, 0)
    mu = mu if keepdim else mu.with_view(mu.st.reshape(var_.shape))
    return var_, mu, back


def var(x: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None):
    v, _, back = _var_mean(x, dim, unbiased, keepdim, correction, "var")
    return prim.cast(v, back)


def std(x: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None):
    v, _, back = _var_mean(x, dim, unbiased, keepdim, correction, "std")
    return prim.cast(E.sqrt(v), back)  # std = sqrt(var)


def var_mean(x: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None):
    v, m, back = _var_mean(x, dim, unbiased, keepdim, correction, "var_mean")
    return prim.cast(v, back), prim.cast(m, back)


def std_mean(x: Tensor, dim: Any = None, unbiased: bool | None = None, keepdim: bool = False, *, correction=None):
    v, m, back = _var_mean(x, dim, unbiased, keepdim, correction, "std_mean")
    return prim.cast(E.sqrt(v), back), prim.cast(m, back)


def logsumexp(x: Tensor, dim: Dims, keepdim: bool = False) -> Tensor:
    wide, back = _widen(prim.float_operand(x))
    dims = normalize_dims(x, dim, "logsumexp")
    m = _extreme(wide, dims, True, "logsumexp")
    m = C.where(C.isfinite(m), m, prim.full_like(m, 0))  # an infinite max shifts by 0, as torch does: no inf - inf
    s = sum(E.exp(E.sub(wide, m)), dims, keepdim)
    m = m if keepdim else m.with_view(m.st.reshape(s.shape))
    return prim.cast(E.add(E.log(s), m), back)  # log sum exp(x) = m + log sum exp(x - m)


# ---- maxima and minima ---------------------------------------------------------------------------------


def _extreme(x: Tensor, dim: Dims, keepdim: bool, op: str, largest: bool = True) -> Tensor:
    dims = normalize_dims(x, dim, op)
    if x.dtype == dt.bool_:
        src = prim.cast(x if largest else C.logical_not(x), dt.int32)  # all(x) = not any(not x)
        # max > 0, not a cast of the max: an empty axis's max is the int minimum, so any() is False there
        out = C.gt(_reduce(src, dims, keepdim, prim.max_reduce), 0)
        return out if largest else C.logical_not(out)
    if largest:
        return _reduce(x, dims, keepdim, prim.max_reduce)
    return E.neg(_reduce(E.neg(x), dims, keepdim, prim.max_reduce))  # min x = -max(-x)


def amax(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    return _extreme(x, dim, keepdim, "amax")


def amin(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    return _extreme(x, dim, keepdim, "amin", largest=False)


def _arg_extreme(x: Tensor, dim: int | None, keepdim: bool, largest: bool, op: str) -> Tensor:
    """The first index of the extreme value (nan counts as the extreme, as in torch), as int64."""
    if dim is None:  # over the flattened tensor; keepdim keeps every axis as size 1
        flat = x.with_view(x.st.reshape((x.numel(),)))
        out = _arg_extreme(flat, 0, False, largest, op)
        return out.with_view(out.st.reshape((1,) * x.ndim)) if keepdim else out
    axis = _one_dim(x, dim, op)
    if x.ndim == 0:
        return prim.scalar(x.graph, 0, dt.int64)
    src = prim.cast(x, dt.int32) if x.dtype == dt.bool_ else x
    m = prim.broadcast_to(_extreme(src, axis, True, op, largest), src.shape)
    beaten = prim.less_than(src, m) if largest else prim.less_than(m, src)
    # A candidate equals the extreme; when nan is present (it propagates into m) the candidates are the nans.
    cand = prim.add(C.isnan(src), prim.mul(C.logical_not(beaten), C.logical_not(C.isnan(m))))
    n = src.shape[axis]
    ramp = [1] * src.ndim
    ramp[axis] = n
    from_end = prim.broadcast_to(prim.iota(x.graph, n - idx(axis, n), ramp), src.shape)  # n - i: first is largest
    best = prim.max_reduce(prim.mul(prim.cast(cand, dt.int64), from_end), axis)
    out = E.sub(n if isinstance(n, int) else _size(x.graph, n, dt.int64), best)  # i = n - (n - i)
    if keepdim:
        out = out.with_view(out.st.reshape([1 if k == axis else d for k, d in enumerate(src.shape)]))
    return out


def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    if x.dtype == dt.bool_:
        raise DTypeError("argmax: does not support bool input (as in torch)")
    return _arg_extreme(x, dim, keepdim, True, "argmax")


def argmin(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    if x.dtype == dt.bool_:
        raise DTypeError("argmin: does not support bool input (as in torch)")
    return _arg_extreme(x, dim, keepdim, False, "argmin")


def _max_or_min(x: Tensor, dim: Any, keepdim: bool, largest: bool) -> Any:
    op = "max" if largest else "min"
    if isinstance(dim, Tensor):
        return (C.maximum if largest else C.minimum)(x, dim)
    if dim is None:
        return _extreme(x, None, False, op, largest)
    _one_dim(x, dim, op)
    return ValuesIndices(_extreme(x, dim, keepdim, op, largest), _arg_extreme(x, dim, keepdim, largest, op))


def max(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001
    """torch.max: `x.max()` -> value; `x.max(dim, keepdim)` -> (values, indices); `x.max(other)` = maximum."""
    return _max_or_min(x, dim, keepdim, True)


def min(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:  # noqa: A001
    """torch.min: `x.min()` -> value; `x.min(dim, keepdim)` -> (values, indices); `x.min(other)` = minimum."""
    return _max_or_min(x, dim, keepdim, False)


def all(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return _extreme(prim.cast(x, dt.bool_), dim, keepdim, "all", largest=False)  # all = min over bools


def any(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001
    return _extreme(prim.cast(x, dt.bool_), dim, keepdim, "any")  # any = max over bools


def count_nonzero(x: Tensor, dim: Dims = None) -> Tensor:
    return sum(prim.cast(x, dt.bool_), normalize_dims(x, dim, "count_nonzero"))  # nan counts: nan != 0


def norm(x: Tensor, p: Any = "fro", dim: Dims = None, keepdim: bool = False, dtype=None) -> Tensor:
    """Vector p-norm over `dim` (all dims by default): p = 'fro'/2, 1, inf, -inf, 0, or any other number."""
    _require_float(x, "norm")  # even with dtype=, as torch requires
    x = prim.cast(x, dtype) if dtype is not None else x
    dims = normalize_dims(x, dim, "norm")
    wide, back = _widen(x)
    a = C.maximum(wide, E.neg(wide))  # |x| = max(x, -x)
    if p == "fro" or p == 2:
        out = E.sqrt(sum(E.mul(wide, wide), dims, keepdim))
    elif p == 1:
        out = sum(a, dims, keepdim)
    elif p == math.inf:
        out = _extreme(a, dims, keepdim, "norm")
    elif p == -math.inf:
        out = _extreme(a, dims, keepdim, "norm", largest=False)
    elif p == 0:
        out = prim.cast(sum(prim.cast(wide, dt.bool_), dims, keepdim), dt.float32)  # the count of nonzeros
    elif isinstance(p, (int, float)) and not isinstance(p, bool):
        powered = E.exp2(E.mul(E.log2(a), p))  # |x|^p = 2^(p log2 |x|)
        out = E.exp2(E.div(E.log2(sum(powered, dims, keepdim)), p))  # (sum |x|^p)^(1/p)
    else:
        raise ValueError(f"norm: p={p!r} is not supported (use 'fro', a number, inf or -inf)")
    return prim.cast(out, back)


# ---- products and scans --------------------------------------------------------------------------------


def _prod_axis(x: Tensor, axis: int) -> Tensor:
    """Exact product over one axis by a pairwise tree: each round multiplies even by odd entries."""
    while as_expr(x.shape[axis]).hi > 1:
        n = x.shape[axis]
        even = isinstance(n, int) and n % 2 == 0
        padded = x if even else _pad_axis(x, axis, 0, 1, fill=1)  # an odd length pairs its last with a 1
        evens = _slice_axis(padded, axis, 0, n, 2)
        odds = _slice_axis(padded, axis, 1, n if even else n + 1, 2)
        x = prim.mul(evens, odds)  # both have ceil(n / 2) entries
    return _drop_axis(x, axis)


def prod(x: Tensor, dim: int | None = None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """Product (exact for ints, zeros and signs: no log/exp); bool and integers give int64, as in torch."""
    if dtype is not None:
        x = prim.cast(x, dtype)
    elif not x.dtype.is_float:
        x = prim.cast(x, dt.int64)
    wide, back = _widen(x)
    return prim.cast(_reduce(wide, normalize_dims(x, dim, "prod"), keepdim, _prod_axis), back)


def _scan(x: Tensor, dim: int, dtype, op: str, combine: Callable, identity: int) -> Tensor:
    """Inclusive prefix scan by doubling steps: y_i <- y_i (+) y_{i-s} for s = 1, 2, 4, .. (identity before 0)."""
    if dtype is not None:
        x = prim.cast(x, dtype)
    elif not x.dtype.is_float:
        x = prim.cast(x, dt.int64)
    axis = _one_dim(x, dim, op)
    if x.ndim == 0:
        return x
    y, back = _widen(x)
    n, step = y.shape[axis], 1
    while step < as_expr(n).hi:  # a symbolic length takes the steps of its largest value; extra ones add identity
        shifted = _slice_axis(_pad_axis(y, axis, step, 0, fill=identity), axis, 0, n, 1)
        y = combine(y, shifted)
        step *= 2
    return prim.cast(y, back)


def cumsum(x: Tensor, dim: int, *, dtype=None) -> Tensor:
    return _scan(x, dim, dtype, "cumsum", prim.add, 0)


def cumprod(x: Tensor, dim: int, *, dtype=None) -> Tensor:
    return _scan(x, dim, dtype, "cumprod", prim.mul, 1)


METHODS = (
    *("sum", "mean", "nansum", "nanmean", "var", "std", "logsumexp", "amax", "amin", "argmax", "argmin"),
    *("max", "min", "all", "any", "count_nonzero", "norm", "prod", "cumsum", "cumprod"),
)

__all__ = ["normalize_dims", "ValuesIndices", "var_mean", "std_mean", *METHODS]
