"""Values made from attributes or shapes: Constant, ConstantOfShape, Range, EyeLike. Their results are known
at import (numpy arrays), except an EyeLike of a symbolic shape."""

from __future__ import annotations

import math

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx import types
from luminal.onnx.context import NodeContext
from luminal.onnx.registry import translates
from luminal.symbolic import Expr
from luminal.tensor import Tensor

VALUE_LIMIT = 1 << 24  # elements computed at import; a larger constant stays a view of one value

_CONSTANT_ATTRS = {
    "value": None,
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
}


@translates("Constant", attrs={*_CONSTANT_ATTRS, "value_string", "value_strings", "sparse_value"})
def constant(ctx: NodeContext) -> np.ndarray:
    given = [name for name in ctx.attrs]
    if len(given) != 1:
        raise ctx.error(f"exactly one value attribute must be given, got {given}")
    name = given[0]
    if name not in _CONSTANT_ATTRS:
        raise ctx.unsupported(f"{name} values are not supported (no string or sparse tensors in luminal)")
    value = ctx.attr(name)
    return value if _CONSTANT_ATTRS[name] is None else np.asarray(value, dtype=_CONSTANT_ATTRS[name])


@translates("ConstantOfShape", attrs={"value"})
def constant_of_shape(ctx: NodeContext) -> np.ndarray | Tensor:
    shape = ctx.ints(0, "shape")
    if any(d < 0 for d in shape):
        raise ctx.error(f"shape {shape} has a negative dim")
    value = ctx.attr("value", np.zeros(1, np.float32))
    if any(isinstance(d, Expr) for d in shape) or math.prod(shape) > VALUE_LIMIT:  # a constant expanded by a view
        return F.full(ctx.graph, shape, value.reshape(-1)[0].item(), dt.dtype_of(value.dtype))
    return np.full(shape, value.reshape(-1)[0], dtype=value.dtype)


@translates("Range")
def range_(ctx: NodeContext) -> np.ndarray | Tensor:
    """start, start + delta, ... up to limit: max(ceil((limit - start) / delta), 0) elements, in the inputs' type
    (the length decides the output shape, so all three must be known at import)."""
    start, limit, delta = (ctx.const(i, what).reshape(()) for i, what in enumerate(("start", "limit", "delta")))
    if any(isinstance(v.item(), Expr) for v in (start, limit, delta)):  # a symbolic bound: an Iota
        if isinstance(delta.item(), Expr):
            raise ctx.unsupported("a symbolic delta is not supported")
        return F.arange(ctx.graph, start.item(), limit.item(), int(delta.item()), dtype=dt.int64)
    if delta == 0:
        raise ctx.error("delta must not be 0")
    n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    if n > VALUE_LIMIT:
        raise ctx.unsupported(f"a range of {n} elements is more than the {VALUE_LIMIT} computed at import")
    wide = np.float64 if start.dtype.kind == "f" or start.dtype.itemsize == 2 else np.int64
    # start + i * delta, not accumulated; in double precision and rounded once, as numpy's arange does
    return (start.astype(wide) + np.arange(n, dtype=wide) * delta.astype(wide)).astype(start.dtype)


def _window(ctx: NodeContext, terms: list[tuple[float, float]]) -> Tensor:
    """sum of c cos(m 2 pi n / N) over (c, m), for n in [0, size); N = size when periodic, else size - 1."""
    size = int(np.asarray(ctx.const(0, "size")).reshape(-1)[0])
    d = types.to_luminal(int(ctx.attr("output_datatype", 1)), f"{ctx.op_type} output_datatype")
    period = size if ctx.attr("periodic", 1) else size - 1
    n = F.cast(F.arange(ctx.graph, size), dt.float32)
    out = None
    for c, m in terms:
        term = F.mul(F.cos(F.mul(n, 2 * np.pi * m / period)), c) if m else F.full_like(n, c)
        out = term if out is None else F.add(out, term)
    return F.cast(out, d)


@translates("HannWindow", attrs={"periodic", "output_datatype"})
def hann_window(ctx: NodeContext) -> Tensor:
    return _window(ctx, [(0.5, 0), (-0.5, 1)])  # sin^2(pi n / N) = (1 - cos(2 pi n / N)) / 2


@translates("HammingWindow", attrs={"periodic", "output_datatype"})
def hamming_window(ctx: NodeContext) -> Tensor:
    return _window(ctx, [(25 / 46, 0), (-21 / 46, 1)])  # alpha - beta cos(2 pi n / N), alpha = 25/46


@translates("BlackmanWindow", attrs={"periodic", "output_datatype"})
def blackman_window(ctx: NodeContext) -> Tensor:
    return _window(ctx, [(0.42, 0), (-0.5, 1), (0.08, 2)])


@translates("EyeLike", attrs={"dtype", "k"})
def eye_like(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    if x.ndim != 2:
        raise ctx.error(f"input must be 2-D, got shape {x.shape}")
    d = types.to_luminal(int(ctx.attr("dtype")), "EyeLike dtype") if "dtype" in ctx.attrs else x.dtype
    k = int(ctx.attr("k", 0))
    rows, cols = x.shape
    ones = F.ones_like(x, dtype=dt.int32)
    mask = F.triu(F.tril(ones, k), k)  # the k-th diagonal: both triangles' common edge
    return F.cast(mask, d)
