"""Reductions over any dims, with keepdim, following torch's signatures."""

from __future__ import annotations

from typing import Sequence

from luminal.hl import prim
from luminal.tensor import Tensor
from luminal.view import ShapeError, format_shape


def normalize_dims(x: Tensor, dim: int | Sequence[int] | None, op: str) -> list[int]:
    """Sorted, non-negative, de-duplicated reduction axes (None means all)."""
    if dim is None:
        return list(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    rank = max(x.ndim, 1)
    out = []
    for d in dims:
        if not isinstance(d, int) or not -rank <= d < rank:
            raise ShapeError(f"{op}: dim {d} is out of range for shape {format_shape(x.shape)}")
        out.append(d % rank)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: dim {dims} repeats an axis")
    return sorted(out)


def _reduce(x: Tensor, dims: list[int], keepdim: bool, reducer) -> Tensor:
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


def sum(x: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, dtype=None) -> Tensor:  # noqa: A001
    """Sum; bool and int32 inputs accumulate as int64, as in torch."""
    from luminal import dtypes as dt

    if dtype is not None:
        x = prim.cast(x, dtype)
    elif not x.dtype.is_float:
        x = prim.cast(x, dt.int64)
    return _reduce(x, normalize_dims(x, dim, "sum"), keepdim, prim.sum_reduce)


def amax(x: Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    from luminal import dtypes as dt

    src = prim.cast(x, dt.int32) if x.dtype == dt.bool_ else x
    out = _reduce(src, normalize_dims(x, dim, "amax"), keepdim, prim.max_reduce)
    return prim.cast(out, x.dtype)


METHODS = ("sum", "amax")

__all__ = ["normalize_dims", *METHODS]
