"""Recording primitives from tensors, plus the broadcasting and promotion every high-level op shares.

High-level ops call only these to add nodes, so no op outside `luminal.ops` ever reaches a graph.
"""

from __future__ import annotations

from typing import Any, Sequence

from luminal import dtypes as dt
from luminal import ops
from luminal.dtypes import DType
from luminal.symbolic import Dim, Expr, as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import ShapeError, ShapeTracker, format_shape

Scalar = int | float | bool


def record(op: ops.Op, *xs: Tensor) -> Tensor:
    g = xs[0].graph if xs else None
    for x in xs:
        if x.graph is not g:
            raise ValueError(f"{op.name}: tensors from different graphs cannot be combined")
    node = g.add(op, [(x.node, x.st) for x in xs])
    return Tensor(g, node.id, ShapeTracker.contiguous(node.shape))


def record_source(graph, op: ops.Op) -> Tensor:
    node = graph.add(op, [])
    return Tensor(graph, node.id, ShapeTracker.contiguous(node.shape))


# ---- shapes --------------------------------------------------------------------------------------------


def broadcast_shapes(*shapes: Sequence[Dim], op: str = "broadcast") -> tuple[Dim, ...]:
    """NumPy/PyTorch broadcasting: align from the right; a 1 stretches to the other size."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for k in range(rank):
        size: Dim = 1
        for s in shapes:
            d = s[k - rank + len(s)] if k - rank + len(s) >= 0 else 1
            if d == 1 or d == size:
                continue
            if size == 1:
                size = d
            else:
                shown = " and ".join(format_shape(s) for s in shapes)
                raise ShapeError(f"{op}: shapes {shown} cannot be broadcast together (dim {k}: {size} vs {d})")
        out.append(as_dim(size))
    return tuple(out)


def broadcast_to(x: Tensor, shape: Sequence[Dim]) -> Tensor:
    shape = tuple(as_dim(d) for d in shape)
    if x.shape == shape:
        return x
    if len(shape) < x.ndim:
        raise ShapeError(f"expand: cannot broadcast {format_shape(x.shape)} to {format_shape(shape)}")
    view = x.st.reshape((1,) * (len(shape) - x.ndim) + tuple(x.st.shape))
    return x.with_view(view.expand(shape))


# ---- dtypes --------------------------------------------------------------------------------------------


def cast(x: Tensor, dtype: Any) -> Tensor:
    d = dt.dtype_of(dtype)
    return x if x.dtype == d else record(ops.Cast(d), x)


def scalar(graph, value: Scalar, dtype: DType, shape: Sequence[Dim] = ()) -> Tensor:
    """A constant of `dtype`, broadcast to `shape` (a view: no data is repeated)."""
    c = graph.constant(value, dtype)
    return broadcast_to(c, shape) if shape else c


def full_like(x: Tensor, value: Scalar, dtype: Any = None) -> Tensor:
    return scalar(x.graph, value, dt.dtype_of(dtype) if dtype is not None else x.dtype, x.shape)


def operands(a: Any, b: Any, op: str = "binary op") -> tuple[Tensor, Tensor]:
    """Two operands (tensors or Python scalars) broadcast to one shape and promoted to one dtype."""
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        d = dt.promote_tensors(a.dtype, a.ndim, b.dtype, b.ndim)
        shape = broadcast_shapes(a.shape, b.shape, op=op)
        return broadcast_to(cast(a, d), shape), broadcast_to(cast(b, d), shape)
    if isinstance(a, Tensor):
        d = dt.promote_scalar(a.dtype, b)
        return cast(a, d), scalar(a.graph, b, d, a.shape)
    if isinstance(b, Tensor):
        d = dt.promote_scalar(b.dtype, a)
        return scalar(b.graph, a, d, b.shape), cast(b, d)
    raise TypeError(f"{op}: at least one operand must be a Tensor, got {type(a).__name__} and {type(b).__name__}")


def float_operand(x: Tensor) -> Tensor:
    """Integer and bool inputs of float functions (exp, sqrt, ...) compute in float32, as in PyTorch."""
    return x if x.dtype.is_float else cast(x, dt.float32)


# ---- the primitives ------------------------------------------------------------------------------------


def log2(x: Tensor) -> Tensor:
    return record(ops.Log2(), x)


def exp2(x: Tensor) -> Tensor:
    return record(ops.Exp2(), x)


def sin(x: Tensor) -> Tensor:
    return record(ops.Sin(), x)


def sqrt(x: Tensor) -> Tensor:
    return record(ops.Sqrt(), x)


def recip(x: Tensor) -> Tensor:
    return record(ops.Recip(), x)


def add(a: Tensor, b: Tensor) -> Tensor:
    return record(ops.Add(), a, b)


def mul(a: Tensor, b: Tensor) -> Tensor:
    return record(ops.Mul(), a, b)


def fmod(a: Tensor, b: Tensor) -> Tensor:
    return record(ops.Mod(), a, b)


def less_than(a: Tensor, b: Tensor) -> Tensor:
    return record(ops.LessThan(), a, b)


def sum_reduce(x: Tensor, axis: int) -> Tensor:
    return record(ops.SumReduce(axis), x)


def max_reduce(x: Tensor, axis: int) -> Tensor:
    return record(ops.MaxReduce(axis), x)


def iota(graph, expr: Expr | int, shape: Sequence[Dim], dtype: Any = dt.int64) -> Tensor:
    """An integer tensor whose element at index (_i0, _i1, ...) is `expr` of those indices."""
    return record_source(graph, ops.Iota(as_expr(expr), tuple(as_dim(d) for d in shape), dt.dtype_of(dtype)))


def gather(data: Tensor, indexes: Tensor) -> Tensor:
    return record(ops.Gather(), data, indexes)


def scatter(dest: Tensor, indexes: Tensor, src: Tensor) -> Tensor:
    return record(ops.Scatter(), dest, indexes, src)
