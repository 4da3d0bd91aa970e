"""Tensors made from nothing but their shape: constants expanded by a view, and Iota expressions.

torch's factories take no tensor, so these take the graph first (`Graph.arange/full/zeros/ones` call them).
Default dtypes follow torch: integers give int64, any float argument float32, a bool fill bool.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from luminal import dtypes as dt
from luminal.dtypes import DType
from luminal.hl import prim
from luminal.symbolic import Dim, Expr, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape, idx

Number = int | float | bool


def _value_dtype(value: Any, dtype: Any) -> DType:
    """torch's factory default: the given dtype, else bool / int64 / float32 by the Python type of the value."""
    if dtype is not None:
        return dt.dtype_of(dtype)
    return dt.bool_ if isinstance(value, bool) else dt.int64 if isinstance(value, (int, np.integer)) else dt.float32


def _shape(shape: Dim | Sequence[Dim], op: str) -> list[Dim]:
    dims = [shape] if isinstance(shape, (int, Expr)) else list(shape)
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise ShapeError(f"{op}: shape {format_shape(dims)} has a negative dimension")
    return [as_dim(d) for d in dims]


def full(graph, shape: Dim | Sequence[Dim], value: Number, dtype: Any = None) -> Tensor:
    """torch.full: one constant, expanded to `shape` by a view (no data is repeated)."""
    return prim.scalar(graph, value, _value_dtype(value, dtype), _shape(shape, "full"))


def zeros(graph, shape: Dim | Sequence[Dim], dtype: Any = dt.float32) -> Tensor:
    return full(graph, shape, 0, dtype)


def ones(graph, shape: Dim | Sequence[Dim], dtype: Any = dt.float32) -> Tensor:
    return full(graph, shape, 1, dtype)


def full_like(x: Tensor, fill_value: Number, dtype: Any = None) -> Tensor:
    return prim.scalar(x.graph, fill_value, dt.dtype_of(dtype) if dtype is not None else x.dtype, x.shape)


def zeros_like(x: Tensor, dtype: Any = None) -> Tensor:
    return full_like(x, 0, dtype)


def ones_like(x: Tensor, dtype: Any = None) -> Tensor:
    return full_like(x, 1, dtype)


def empty_like(x: Tensor, dtype: Any = None) -> Tensor:
    return full_like(x, 0, dtype)  # unspecified contents in torch; zeros here, so runs are reproducible


def new_full(x: Tensor, size: Sequence[Dim], fill_value: Number, dtype: Any = None) -> Tensor:
    return full(x.graph, size, fill_value, dtype if dtype is not None else x.dtype)


def new_zeros(x: Tensor, size: Sequence[Dim], dtype: Any = None) -> Tensor:
    return new_full(x, size, 0, dtype)


def new_ones(x: Tensor, size: Sequence[Dim], dtype: Any = None) -> Tensor:
    return new_full(x, size, 1, dtype)


def new_empty(x: Tensor, size: Sequence[Dim], dtype: Any = None) -> Tensor:
    return new_full(x, size, 0, dtype)


def arange(
    graph, start: Dim | float, end: Dim | float | None = None, step: Dim | float = 1, dtype: Any = None
) -> Tensor:
    """torch.arange: [start, end) by step. Integer arguments (symbolic ones too: the length is then an
    expression) give an Iota of start + i * step; float arguments compute start + i * step in float32."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ShapeError("arange: step must be nonzero")
    if all(isinstance(v, (int, float)) for v in (start, end, step)) and (end - start) * step < 0:
        raise ShapeError(
            f"arange: bounds {start}, {end} and step {step} go opposite ways (an empty range in torch errs)"
        )
    floats = any(isinstance(v, float) for v in (start, end, step))
    d = dt.dtype_of(dtype) if dtype is not None else dt.float32 if floats else dt.int64
    if not floats:
        span = as_expr(end) - start if step > 0 else as_expr(start) - end
        length = as_dim(((span + abs(step) - 1) // abs(step)).max(0))  # ceil(span / |step|), never negative
        return prim.cast(prim.iota(graph, as_expr(start) + idx(0, length) * step, [length]), d)
    if any(isinstance(v, Expr) for v in (start, end, step)):
        raise ShapeError("arange: a symbolic bound needs integer start and step (a float length has no expression)")
    length = max(math.ceil((end - start) / step), 0)
    i = prim.cast(prim.iota(graph, idx(0, length), [length]), dt.float32)
    return prim.cast(_affine(i, step, start), d)


def _affine(x: Tensor, scale: float, shift: float) -> Tensor:
    from luminal.hl import elementwise as E

    return E.add(E.mul(x, scale), shift)  # shift + scale * x


def linspace(graph, start: float, end: float, steps: int, dtype: Any = None) -> Tensor:
    """torch.linspace, as torch's CPU kernel computes it: start + step * i for the first half, end - step *
    (steps - 1 - i) for the rest, so both ends are exact."""
    if not isinstance(steps, int) or steps < 0:
        raise ShapeError(f"linspace: steps must be a non-negative int, got {steps!r}")
    d = dt.dtype_of(dtype) if dtype is not None else dt.float32
    if d.is_int:  # torch converts the ends first; its values may still differ by one where its rounding does
        start, end = int(start), int(end)
    if steps <= 1:
        return full(graph, [steps], start, d)
    from luminal.hl import combine

    step, half = (end - start) / (steps - 1), steps // 2
    head = prim.cast(prim.iota(graph, idx(0, half), [half]), dt.float32)
    tail = prim.cast(prim.iota(graph, steps - 1 - half - idx(0, steps - half), [steps - half]), dt.float32)
    return prim.cast(combine.cat([_affine(head, step, start), _affine(tail, -step, end)]), d)


def eye(graph, n: Dim, m: Dim | None = None, dtype: Any = dt.float32) -> Tensor:
    """torch.eye: 1 where row == column, from an Iota of (i0 < i1 + 1) and (i1 < i0 + 1)."""
    m = n if m is None else m
    shape = _shape([n, m], "eye")
    i, j = idx(0, shape[0]), idx(1, shape[1])
    return prim.cast(prim.iota(graph, (i < j + 1) & (j < i + 1), shape), dt.dtype_of(dtype))


def tensor(graph, data: Any, dtype: Any = None) -> Tensor:
    """torch.tensor for small literal data (index lists, masks): integers and bools become one Iota whose
    expression picks each value by position; floats, constants placed by padded views. Real data belongs in
    graph inputs or weights."""
    arr = np.asarray(data)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"tensor: cannot make a tensor of {arr.dtype} data")
    default = dt.bool_ if arr.dtype.kind == "b" else dt.int64 if arr.dtype.kind in "iu" else dt.float32
    d = dt.dtype_of(dtype) if dtype is not None else default
    flat, n = arr.reshape(-1), int(arr.size)
    i = idx(0, n)
    if arr.dtype.kind in "biu":
        values = [int(v) for v in flat]
        if n >= 2 and all(b - a == values[1] - values[0] for a, b in zip(values, values[1:])):
            expr = values[0] + i * (values[1] - values[0])  # an arithmetic progression is one term
        else:
            expr = sum((v * ((i < k + 1) & (i + 1 > k)) for k, v in enumerate(values) if v), as_expr(0))
        out = prim.cast(prim.iota(graph, expr, [n]), d)
    else:
        out = prim.scalar(graph, 0, d, [n])
        for k, v in enumerate(flat.tolist()):
            if v != 0 or v != v:  # zeros are already there; nan != 0 holds too
                one = prim.scalar(graph, v, d, [1])
                out = prim.add(out, one.with_view(one.st.pad([(k, n - k - 1)])))
    return out.with_view(out.st.reshape(arr.shape))


METHODS = ("new_full", "new_zeros", "new_ones", "new_empty")

__all__ = list(METHODS) + [
    "arange",
    "full",
    "zeros",
    "ones",
    "full_like",
    "zeros_like",
    "ones_like",
    "empty_like",
    "linspace",
    "eye",
    "tensor",
]
