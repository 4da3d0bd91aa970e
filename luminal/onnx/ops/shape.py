"""Shapes and layout: Shape, Size, Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Expand, Tile,
DepthToSpace, SpaceToDepth. All of them are views in luminal; Shape and Size of concrete shapes are values
known at import (which is what lets exported shape arithmetic fold away)."""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal.hl import prim
from luminal.onnx import symbolic
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axes
from luminal.onnx.registry import translates
from luminal.symbolic import as_dim, as_expr
from luminal.tensor import Tensor
from luminal.view import dims_product


def _dims_value(ctx: NodeContext, dims: list) -> np.ndarray:
    """int64 [len(dims)], known at import: numbers, or expressions of the symbols (see onnx/symbolic.py)."""
    return symbolic.shape_value(dims)


@translates("Shape", attrs={"start", "end"})
def shape(ctx: NodeContext) -> np.ndarray | Tensor:
    dims = list(ctx.x(0).shape)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return _dims_value(ctx, dims[slice(start, end)])  # start/end clamp like Python slices (opset 15)


@translates("Size")
def size(ctx: NodeContext) -> np.ndarray | Tensor:
    return symbolic.shape_value([dims_product(ctx.x(0).shape)]).reshape(())


@translates("Reshape", attrs={"allowzero"})
def reshape(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    target = ctx.ints(1, "shape")
    allowzero = ctx.attr("allowzero", 0)
    if allowzero and 0 in target and -1 in target:
        raise ctx.error(f"shape {target} has both 0 and -1 with allowzero=1")
    dims = []
    for k, d in enumerate(target):
        if d == 0 and not allowzero:
            if k >= x.ndim:
                raise ctx.error(f"shape {target}: 0 at position {k} copies a dim the input {x.shape} lacks")
            dims.append(x.shape[k])  # 0 copies the input's dim
        else:
            dims.append(d)
    return F.reshape(x, dims)


@translates("Transpose", attrs={"perm"})
def transpose(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    perm = ctx.attr("perm", list(range(x.ndim))[::-1])
    return F.permute(x, axes(ctx, perm, x.ndim, "perm"))


@translates("Flatten", attrs={"axis"})
def flatten(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    a = ctx.attr("axis", 1)
    a = a + x.ndim if a < 0 else a  # counted from x's rank; a == rank puts everything in the first dim
    if not 0 <= a <= x.ndim:
        raise ctx.error(f"axis {ctx.attr('axis')} is out of range for rank {x.ndim}")
    outer, inner = dims_product(x.shape[:a]), dims_product(x.shape[a:])
    return F.reshape(x, [as_dim(outer), as_dim(inner)])


def _axes_arg(ctx: NodeContext, what: str) -> list[int] | None:
    """Squeeze/Unsqueeze axes: an attribute before opset 13, an (optional) input from 13 on."""
    if ctx.opset < 13:
        return ctx.attr("axes")
    if "axes" in ctx.attrs:
        raise ctx.error("axes is an input from opset 13 on, not an attribute")
    return ctx.ints(1, what) if ctx.has(1) else None


@translates("Squeeze", attrs={"axes"})
def squeeze(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    wanted = _axes_arg(ctx, "axes")
    if wanted is None:
        return F.squeeze(x)
    dims = axes(ctx, wanted, x.ndim)
    for d in dims:
        if x.shape[d] != 1:
            raise ctx.error(f"cannot squeeze axis {d} of shape {x.shape}: its size is not 1")
    return F.reshape(x, [n for k, n in enumerate(x.shape) if k not in dims])


@translates("Unsqueeze", attrs={"axes"})
def unsqueeze(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    wanted = _axes_arg(ctx, "axes")
    if wanted is None:
        raise ctx.error("axes are required")
    rank = x.ndim + len(wanted)
    dims = set(axes(ctx, wanted, rank))  # axes index the output
    rest = iter(x.shape)
    return F.reshape(x, [1 if k in dims else next(rest) for k in range(rank)])


@translates("Expand")
def expand(ctx: NodeContext) -> Tensor:
    """Broadcast both ways: the target shape may hold 1 where the input is larger (numpy's rule)."""
    x = ctx.x(0)
    target = ctx.ints(1, "shape")
    out = prim.broadcast_shapes(x.shape, target, op="Expand")
    return F.expand(x, list(out))


@translates("Tile")
def tile(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    repeats = ctx.ints(1, "repeats")
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise ctx.error(f"repeats {repeats} must be one non-negative count per input dim ({x.ndim})")
    return F.tile(x, repeats)


@translates("DepthToSpace", attrs={"blocksize", "mode"})
def depth_to_space(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    b, mode = int(ctx.attr("blocksize")), ctx.attr("mode", "DCR")
    n, c, h, w = x.shape
    if mode == "DCR":  # depth split as (b, b, c'), column-row-depth
        y = F.reshape(x, [n, b, b, c // (b * b), h, w]).permute(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":  # depth split as (c', b, b)
        y = F.reshape(x, [n, c // (b * b), b, b, h, w]).permute(0, 1, 4, 2, 5, 3)
    else:
        raise ctx.error(f"mode must be DCR or CRD, got {mode!r}")
    return F.reshape(y, [n, c // (b * b), as_dim(as_expr(h) * b), as_dim(as_expr(w) * b)])


@translates("SpaceToDepth", attrs={"blocksize", "mode"})
def space_to_depth(ctx: NodeContext) -> Tensor:
    """The inverse of DepthToSpace: each b x b block becomes channels, ordered (row, column, channel) in DCR
    mode and (channel, row, column) in CRD."""
    x = ctx.x(0)
    b, mode = int(ctx.attr("blocksize")), ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"mode must be DCR or CRD, got {mode!r}")
    n, c, h, w = x.shape
    y = F.reshape(x, [n, c, as_dim(as_expr(h) // b), b, as_dim(as_expr(w) // b), b])
    y = y.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
    return F.reshape(y, [n, c * b * b, as_dim(as_expr(h) // b), as_dim(as_expr(w) // b)])
