"""Helpers the translators share: axes, dtype checks, folding a list of tensors with a binary op."""

from __future__ import annotations

from typing import Callable, Sequence

import ml_dtypes

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx.context import NodeContext
from luminal.tensor import Tensor


def axis(ctx: NodeContext, a: int, rank: int, what: str = "axis") -> int:
    """A non-negative axis; ONNX counts negative axes from the end."""
    if not -max(rank, 1) <= a < max(rank, 1):
        raise ctx.error(f"{what} {a} is out of range for rank {rank}")
    return a % max(rank, 1)


def axes(ctx: NodeContext, values: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    out = [axis(ctx, int(a), rank, what) for a in values]
    if len(set(out)) != len(out):
        raise ctx.error(f"{what} {list(values)} repeat an axis")
    return out


def require_float(ctx: NodeContext, x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{x.dtype.name} inputs are not supported (floating-point only)")
    return x


def require_dtypes(ctx: NodeContext, x: Tensor, allowed: Sequence[dt.DType]) -> Tensor:
    if x.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise ctx.unsupported(f"{x.dtype.name} inputs are not supported ({names} are)")
    return x


def fold(tensors: Sequence[Tensor], op: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    out = tensors[0]
    for t in tensors[1:]:
        out = op(out, t)
    return out


def clamp_to_finite(x: Tensor, dtype: dt.DType) -> Tensor:
    """x (a computable float) clamped to the largest finite values of the 8- or 4-bit float `dtype`, nan kept: ONNX's
    saturate, before a cast that alone gives inf or nan out of range."""
    top = float(ml_dtypes.finfo(dtype.np).max)
    return F.clamp(x, -top, top)  # (max and min propagate nan)
