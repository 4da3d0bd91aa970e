"""Reductions: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare}, ArgMax, ArgMin.

Where the axes live changed: ReduceSum takes them as an input from opset 13, the others from opset 18 (an
attribute before). With no axes every axis is reduced, unless noop_with_empty_axes makes that the identity.
"""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axes, axis
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

_AXES_INPUT_SINCE = {"ReduceSum": 13}  # every other Reduce* took axes as an input from opset 18


def _reduced_axes(ctx: NodeContext, x: Tensor) -> list[int] | None:
    """The axes to reduce, or None for the identity (no axes with noop_with_empty_axes=1)."""
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.op_type, 18):
        wanted = ctx.ints(1, "axes") if ctx.has(1) else []
    else:
        wanted = list(ctx.attr("axes", []))
    if not wanted:
        return None if ctx.attr("noop_with_empty_axes", 0) else list(range(x.ndim))
    return axes(ctx, wanted, x.ndim)


def _reduce(ctx: NodeContext, fn) -> Tensor:
    x = ctx.x(0)
    dims = _reduced_axes(ctx, x)
    if dims is None:
        return x
    if x.ndim == 0:
        return x
    keep = bool(ctx.attr("keepdims", 1))
    return fn(x, dims, keep)


def _same_type(fn):
    """fn computed as luminal does it (ints widen to int64 in sums), returned in the input's element type."""
    return lambda x, dims, keep: F.cast(fn(x, dims, keep), x.dtype)


def _floats(ctx: NodeContext, x: Tensor) -> None:
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{x.dtype.name} inputs are not supported (floating-point only)")


_REDUCERS = {
    "ReduceSum": lambda x, d, k: F.sum(x, d, keepdim=k),
    "ReduceMean": lambda x, d, k: F.mean(x, d, keepdim=k),
    "ReduceProd": lambda x, d, k: _prod(x, d, k),
    "ReduceL1": lambda x, d, k: F.sum(F.abs(x), d, keepdim=k),
    "ReduceL2": lambda x, d, k: F.sqrt(F.sum(F.mul(x, x), d, keepdim=k)),
    "ReduceSumSquare": lambda x, d, k: F.sum(F.mul(x, x), d, keepdim=k),
    "ReduceLogSum": lambda x, d, k: F.log(F.sum(x, d, keepdim=k)),
    "ReduceLogSumExp": lambda x, d, k: _logsumexp(x, d, k),
    "ReduceMax": lambda x, d, k: _extreme(x, d, k, F.amax),
    "ReduceMin": lambda x, d, k: _extreme(x, d, k, F.amin),
}
_FLOAT_ONLY = {"ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}


def _prod(x: Tensor, dims: list[int], keep: bool) -> Tensor:
    if any(x.shape[d] == 0 for d in dims):  # the empty product is 1
        shape = [1 if k in dims else n for k, n in enumerate(x.shape) if keep or k not in dims]
        return F.full(x.graph, shape, 1, x.dtype)
    for d in sorted(dims, reverse=True):  # one axis at a time (F.prod takes one); from the back keeps indices
        x = F.prod(x, d, keepdim=keep) if x.ndim else x
    return x


def _logsumexp(x: Tensor, dims: list[int], keep: bool) -> Tensor:
    # max-shifted, so large inputs do not overflow; an all -inf (or empty) slice gives -inf, as log(0) does
    m = F.amax(x, dims, keepdim=True)
    safe = F.where(F.isfinite(m), m, F.zeros_like(m))
    total = F.sum(F.exp(F.sub(x, safe)), dims, keepdim=True)
    out = F.add(F.log(total), safe)
    return out if keep else F.squeeze(out, dims)


def _extreme(x: Tensor, dims: list[int], keep: bool, fn) -> Tensor:
    if x.dtype == dt.bool_:  # opset 20 allows bool: max is "any true", min is "none false" (False, True if empty)
        counted = x if fn is F.amax else F.logical_not(x)
        hits = F.sum(F.cast(counted, dt.int32), dims, keepdim=keep)
        return F.gt(hits, 0) if fn is F.amax else F.eq(hits, 0)
    if any(x.shape[d] == 0 for d in dims) and fn is F.amin:
        # an empty min is +inf (or the type's largest), the mirror of MaxReduce's empty max
        return F.neg(F.amax(F.neg(x), dims, keepdim=keep))
    return fn(x, dims, keepdim=keep)


def _reduce_translator(op: str):
    reducer = _REDUCERS[op]

    def translate(ctx: NodeContext) -> Tensor:
        x = ctx.x(0)
        if op in _FLOAT_ONLY:
            _floats(ctx, x)
        if x.dtype == dt.bool_ and op not in ("ReduceMax", "ReduceMin"):
            raise ctx.unsupported("bool inputs are not supported")
        return _reduce(ctx, reducer if x.dtype == dt.bool_ else _same_type(reducer))

    return translate


for _op in _REDUCERS:
    translates(_op, attrs={"axes", "keepdims", "noop_with_empty_axes"})(_reduce_translator(_op))


def _arg(ctx: NodeContext, fn) -> Tensor:
    x = ctx.x(0)
    if x.dtype == dt.bool_:
        raise ctx.unsupported("bool inputs are not supported")
    a = axis(ctx, ctx.attr("axis", 0), x.ndim)
    keep = bool(ctx.attr("keepdims", 1))
    if ctx.attr("select_last_index", 0):  # the last index of the extreme: the first one of the flipped axis
        n = x.shape[a]
        return F.sub(n - 1, fn(F.flip(x, a), a, keepdim=keep))
    return fn(x, a, keepdim=keep)


@translates("ArgMax", attrs={"axis", "keepdims", "select_last_index"})
def argmax(ctx: NodeContext) -> Tensor:
    return _arg(ctx, F.argmax)


@translates("ArgMin", attrs={"axis", "keepdims", "select_last_index"})
def argmin(ctx: NodeContext) -> Tensor:
    return _arg(ctx, F.argmin)


def _scan(ctx: NodeContext, fn, identity: int) -> Tensor:
    x = ctx.x(0)
    a = axis(ctx, int(np.asarray(ctx.const(1, "axis")).reshape(-1)[0]), x.ndim)
    if ctx.attr("reverse", 0):
        x = F.flip(x, a)
    y = F.cast(fn(x, a), x.dtype)
    if ctx.attr("exclusive", 0):  # shift by one: the sum of the elements strictly before
        y = _shift_in(y, a, identity)
    return F.flip(y, a) if ctx.attr("reverse", 0) else y


def _shift_in(y: Tensor, a: int, identity: int) -> Tensor:
    """y moved one step along axis a, `identity` coming in first: the exclusive scan from the inclusive one."""
    widths = [0, 0] * (y.ndim - 1 - a) + [1, -1]
    shifted = F.pad(y, widths)
    if identity == 0:
        return shifted
    first = F.pad(F.ones_like(y[(slice(None),) * a + (slice(0, 1),)]), [0, 0] * (y.ndim - 1 - a) + [0, y.shape[a] - 1])
    return F.add(shifted, F.mul(first, identity))


@translates("CumSum", attrs={"exclusive", "reverse"})
def cumsum(ctx: NodeContext) -> Tensor:
    return _scan(ctx, F.cumsum, 0)


@translates("CumProd", attrs={"exclusive", "reverse"})
def cumprod(ctx: NodeContext) -> Tensor:
    return _scan(ctx, F.cumprod, 1)
