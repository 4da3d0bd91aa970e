"""Comparisons, bool logic, selection and the extremes: Equal .. Where, Max/Min/Clip, IsNaN/IsInf."""

from __future__ import annotations

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import fold, require_float
from luminal.onnx.registry import translates
from luminal.tensor import Tensor


def _compare(fn):
    def translate(ctx: NodeContext) -> Tensor:
        a, b = ctx.x(0), ctx.x(1)
        if a.dtype != b.dtype:
            raise ctx.error(f"operands must share one element type, got {a.dtype.name} and {b.dtype.name}")
        return fn(a, b)

    return translate


for _op, _fn in {
    "Equal": F.eq,
    "Less": F.lt,
    "Greater": F.gt,
    "LessOrEqual": F.le,
    "GreaterOrEqual": F.ge,
}.items():
    translates(_op)(_compare(_fn))


def _logical(fn):
    def translate(ctx: NodeContext) -> Tensor:
        xs = ctx.inputs()
        if any(x.dtype != dt.bool_ for x in xs):
            raise ctx.error("operands must be bool")
        return fn(*xs)

    return translate


translates("And")(_logical(F.logical_and))
translates("Or")(_logical(F.logical_or))
translates("Xor")(_logical(F.logical_xor))
translates("Not")(_logical(F.logical_not))


@translates("Where")
def where(ctx: NodeContext) -> Tensor:
    c, a, b = ctx.x(0), ctx.x(1), ctx.x(2)
    if a.dtype != b.dtype:
        raise ctx.error(f"X and Y must share one element type, got {a.dtype.name} and {b.dtype.name}")
    return F.where(c, a, b)


@translates("Max")
def max_(ctx: NodeContext) -> Tensor:
    return fold(ctx.inputs(), F.maximum)


@translates("Min")
def min_(ctx: NodeContext) -> Tensor:
    return fold(ctx.inputs(), F.minimum)


@translates("Clip", attrs={"min", "max"})
def clip(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    if x.dtype == dt.bool_:
        raise ctx.unsupported("bool inputs are not supported")
    if ctx.opset < 11:  # bounds were attributes before opset 11
        lo, hi = ctx.attr("min", float("-inf")), ctx.attr("max", float("inf"))
        return F.clamp(x, lo, hi)
    lo = ctx.x(1) if ctx.has(1) else None
    hi = ctx.x(2) if ctx.has(2) else None
    if lo is None and hi is None:
        return x
    return F.clamp(x, lo, hi)


@translates("IsNaN")
def isnan(ctx: NodeContext) -> Tensor:
    return F.isnan(require_float(ctx, ctx.x(0)))


@translates("IsInf", attrs={"detect_positive", "detect_negative"})
def isinf(ctx: NodeContext) -> Tensor:
    x = require_float(ctx, ctx.x(0))
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    inf = F.full_like(x, float("inf"))
    hits = [F.eq(x, inf)] if pos else []
    hits += [F.eq(x, F.neg(inf))] if neg else []
    if not hits:
        return F.zeros_like(x, dtype=dt.bool_)
    return fold(hits, F.logical_or)
