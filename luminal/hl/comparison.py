"""Comparisons, logic, selection (where), minimum/maximum/clamp and the nan/inf tests.

Everything here is built from LessThan, the bool meanings of Add (or) and Mul (and), MaxReduce and Gather:
  not p = p < True;  a == b = not (a < b or b < a), and for floats also "a + b is not nan" (which is
  false exactly when a or b is nan: inf + -inf is nan too, but inf and -inf are unequal anyway).
Selection never multiplies by a mask: c*a + (1-c)*b turns an unselected inf or nan into nan (where(mask,
-inf, x), the attention mask, would break). It is a Gather over the candidates stacked on a new axis.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.hl.prim import operands
from luminal.tensor import Tensor
from luminal.view import ShapeTracker, dims_product

# ---- bool algebra ---------------------------------------------------------------------------------------


def _not(p: Tensor) -> Tensor:
    return prim.less_than(p, prim.full_like(p, True))  # not p = p < True


def _or(p: Tensor, q: Tensor) -> Tensor:
    return prim.add(p, q)  # Add on bool is or


def _and(p: Tensor, q: Tensor) -> Tensor:
    return prim.mul(p, q)  # Mul on bool is and


def _truth(x: Tensor) -> Tensor:
    return prim.cast(x, dt.bool_)  # x != 0 (nan is true, as in C and torch)


def logical_not(x: Tensor) -> Tensor:
    return _not(_truth(x))


def logical_and(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "logical_and")
    return _and(_truth(a), _truth(b))


def logical_or(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "logical_or")
    return _or(_truth(a), _truth(b))


def logical_xor(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "logical_xor")
    p, q = _truth(a), _truth(b)
    return _or(prim.less_than(p, q), prim.less_than(q, p))  # p xor q = p != q = (p < q) or (q < p)


def _bitwise(name: str, logical):
    """&, |, ^ and ~ are logical on bool tensors; integer bit operations have no primitive here."""

    def op(a: Any, b: Any = None) -> Tensor:
        xs = [v for v in (a, b) if v is not None]
        bad = [v.dtype.name for v in xs if isinstance(v, Tensor) and v.dtype != dt.bool_]
        bad += [type(v).__name__ for v in xs if not isinstance(v, (Tensor, bool))]
        if bad:
            raise dt.DTypeError(f"{name} is supported on bool tensors only (logical), got {', '.join(bad)}")
        return logical(*xs)

    op.__name__ = name
    return op


bitwise_and = _bitwise("bitwise_and", logical_and)
bitwise_or = _bitwise("bitwise_or", logical_or)
bitwise_xor = _bitwise("bitwise_xor", logical_xor)
bitwise_not = _bitwise("bitwise_not", logical_not)


# ---- comparisons --------------------------------------------------------------------------------------


def _below_inf(x: Tensor) -> tuple[Tensor, Tensor]:
    """(x < inf, -inf < x): (T, T) finite, (F, T) +inf, (T, F) -inf, (F, F) nan."""
    return prim.less_than(x, prim.full_like(x, math.inf)), prim.less_than(prim.full_like(x, -math.inf), x)


def _isnan(x: Tensor) -> Tensor:
    return _not(_or(*_below_inf(x)))  # nan is neither below inf nor above -inf


def lt(a: Any, b: Any) -> Tensor:
    return prim.less_than(*operands(a, b, "lt"))


def gt(a: Any, b: Any) -> Tensor:
    b, a = operands(b, a, "gt")
    return prim.less_than(b, a)  # a > b = b < a


def eq(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "eq")
    same = _not(_or(prim.less_than(a, b), prim.less_than(b, a)))  # neither is less
    if not a.dtype.is_float:
        return same
    return _and(same, _not(_isnan(prim.add(a, b))))  # and neither is nan


def ne(a: Any, b: Any) -> Tensor:
    return _not(eq(a, b))


def le(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "le")
    if not a.dtype.is_float:
        return _not(prim.less_than(b, a))  # a <= b = not b < a (no nan in integers)
    return _or(prim.less_than(a, b), eq(a, b))


def ge(a: Any, b: Any) -> Tensor:
    return le(b, a)


# ---- nan and inf --------------------------------------------------------------------------------------


def isnan(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return prim.full_like(x, False, dt.bool_)
    return _isnan(x)


def isinf(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return prim.full_like(x, False, dt.bool_)
    below, above = _below_inf(x)
    return _or(prim.less_than(below, above), prim.less_than(above, below))  # exactly one holds


def isfinite(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return prim.full_like(x, True, dt.bool_)
    return _and(*_below_inf(x))


def nan_to_num(x: Tensor, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """nan, +inf and -inf replaced (by default with 0 and the dtype's largest and lowest finite values)."""
    if not x.dtype.is_float:
        return x
    big = _finfo_max(x.dtype)
    below, above = _below_inf(x)
    choice = prim.add(_as_index(below, 1), _as_index(above, 2))  # nan 0, -inf 1, +inf 2, finite 3
    values = [nan, -big if neginf is None else neginf, big if posinf is None else posinf]
    return _choose(choice, [*(prim.full_like(x, v) for v in values), x])


def _finfo_max(d: dt.DType) -> float:
    return float(ml_dtypes.finfo(d.np).max)


def _as_index(p: Tensor, k: int) -> Tensor:
    return prim.mul(prim.cast(p, dt.int64), prim.full_like(p, k, dt.int64))


# ---- selection ----------------------------------------------------------------------------------------


def _choose(choice: Tensor, candidates: Sequence[Tensor]) -> Tensor:
    """y[i] = candidates[choice[i]][i]: one Gather from the candidates stacked on a new first axis.

    Candidates share choice's shape and one dtype; choice is an integer in [0, len(candidates)).
    """
    shape, k = choice.shape, len(candidates)
    stacked = None
    for j, c in enumerate(candidates):
        view = c.st.reshape((1, *shape)).pad([(j, k - 1 - j)] + [(0, 0)] * len(shape))
        layer = c.with_view(view)  # zero (False) outside row j, so the sum of the rows is the stack
        stacked = layer if stacked is None else prim.add(stacked, layer)
    flat = prim.iota(choice.graph, ShapeTracker.contiguous(shape).index, shape)  # row-major position
    size = prim.iota(choice.graph, dims_product(shape), shape)  # elements per row
    return prim.gather(stacked, prim.add(flat, prim.mul(prim.cast(choice, dt.int64), size)))


def result_type(*values: Any) -> dt.DType:
    """torch.result_type over tensors and Python scalars: tensors decide, a scalar only lifts the category."""
    tensors = [v for v in values if isinstance(v, Tensor)]
    d = tensors[0].dtype if tensors else dt.bool_
    ndim = tensors[0].ndim if tensors else 0
    for t in tensors[1:]:
        d = dt.promote_tensors(d, ndim, t.dtype, t.ndim)
        ndim = max(ndim, t.ndim)
    for v in values:
        if not isinstance(v, Tensor):
            d = dt.promote_scalar(d, v)
    return d  # scalars alone: bool < int64 < float32, as torch's defaults


def where(condition: Tensor, input: Any = None, other: Any = None) -> Tensor:  # noqa: A002 - torch's name
    """torch.where(condition, input, other): input where condition holds, else other (broadcast, promoted)."""
    if input is None or other is None:
        raise TypeError("where(condition) alone (nonzero) has a data-dependent shape; pass input and other")
    if not isinstance(condition, Tensor) or condition.dtype != dt.bool_:
        got = condition.dtype.name if isinstance(condition, Tensor) else type(condition).__name__
        raise dt.DTypeError(f"where: condition must be a bool tensor, got {got}")
    d = result_type(input, other)
    shapes = [condition.shape] + [v.shape for v in (input, other) if isinstance(v, Tensor)]
    shape = prim.broadcast_shapes(*shapes, op="where")
    a, b = (
        prim.broadcast_to(prim.cast(v, d), shape)
        if isinstance(v, Tensor)
        else prim.scalar(condition.graph, v, d, shape)
        for v in (input, other)
    )
    return _choose(prim.broadcast_to(condition, shape), [b, a])  # row 0 is other, row 1 is input


def _where_method(self: Tensor, condition: Tensor, other: Any) -> Tensor:
    return where(condition, self, other)  # torch's Tensor.where(condition, y): self is the value, not the mask


# ---- minimum, maximum, clamp --------------------------------------------------------------------------


def _negate(x: Tensor) -> Tensor:
    return prim.mul(x, prim.full_like(x, -1))


def maximum(a: Any, b: Any) -> Tensor:
    """The larger of a and b; nan if either is nan (as torch.maximum)."""
    a, b = operands(a, b, "maximum")
    if a.dtype == dt.bool_:
        return _or(a, b)
    n = a.ndim
    rows = [x.with_view(x.st.reshape((1, *x.shape)).pad([(j, 1 - j)] + [(0, 0)] * n)) for j, x in enumerate((a, b))]
    return prim.max_reduce(prim.add(*rows), 0)  # max over the stack (a, b); MaxReduce propagates nan


def minimum(a: Any, b: Any) -> Tensor:
    """The smaller of a and b; nan if either is nan (as torch.minimum)."""
    a, b = operands(a, b, "minimum")
    if a.dtype == dt.bool_:
        return _and(a, b)
    if a.dtype.is_int:  # a + b - max(a, b): exact in wrapping integer arithmetic, even at the type's minimum
        return prim.add(prim.add(a, b), _negate(maximum(a, b)))
    return _negate(maximum(_negate(a), _negate(b)))  # min(a, b) = -max(-a, -b)


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
    """min(max(x, min), max): min > max gives max; a nan input or bound gives nan (as torch.clamp)."""
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if x.dtype == dt.bool_:
        raise dt.DTypeError("clamp is not defined on bool tensors")
    out = prim.cast(x, result_type(x, *(v for v in (min, max) if v is not None)))
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


clip = clamp


# ---- operators ----------------------------------------------------------------------------------------


def binary_operator(fn, reflected: bool = False):
    """A Tensor operator method: NotImplemented (so Python raises TypeError) for operands that are not numbers."""

    def method(self: Tensor, other: Any) -> Any:
        if not isinstance(other, (Tensor, bool, int, float, np.number)):
            return NotImplemented
        return fn(other, self) if reflected else fn(self, other)

    method.__name__ = f"__{'r' if reflected else ''}{fn.__name__}__"
    return method


_eq, _ne, _lt, _le, _gt, _ge = (binary_operator(f) for f in (eq, ne, lt, le, gt, ge))
_and_op, _or_op, _xor_op = (binary_operator(f) for f in (bitwise_and, bitwise_or, bitwise_xor))
_rand_op, _ror_op, _rxor_op = (binary_operator(f, reflected=True) for f in (bitwise_and, bitwise_or, bitwise_xor))

METHODS = (
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "maximum",
    "minimum",
    "clamp",
    "clip",
    "isnan",
    "isinf",
    "isfinite",
    "nan_to_num",
)
DUNDERS = {
    "__eq__": "_eq",
    "__ne__": "_ne",
    "__lt__": "_lt",
    "__le__": "_le",
    "__gt__": "_gt",
    "__ge__": "_ge",
    "__and__": "_and_op",
    "__or__": "_or_op",
    "__xor__": "_xor_op",
    "__rand__": "_rand_op",
    "__ror__": "_ror_op",
    "__rxor__": "_rxor_op",
    "__invert__": "bitwise_not",
    "where": "_where_method",  # not a dunder: Tensor.where takes (condition, other), unlike torch.where
}

__all__ = [*METHODS, "where", "result_type"]
