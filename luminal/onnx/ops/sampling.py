"""Sampling grids: AffineGrid (GridSample would read through them).

AffineGrid maps the normalised coordinates of every output position, in [-1, 1] (pixel centres, or corners
with align_corners), through theta: grid[n, (d,) h, w] = theta[n] @ (x, y, (z,) 1). The coordinate table
depends only on the size, so it is built at import; the transform is a matmul.
"""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_float
from luminal.onnx.registry import translates
from luminal.onnx.scope import materialize
from luminal.tensor import Tensor


def _coordinates(n: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.array([-1.0])
    return (2 * np.arange(n) + 1) / n - 1  # pixel centres


@translates("AffineGrid", attrs={"align_corners"})
def affine_grid(ctx: NodeContext) -> Tensor:
    theta = require_float(ctx, ctx.x(0))
    size = ctx.ints(1, "size")
    spatial = size[2:]
    if len(spatial) not in (2, 3) or theta.shape[1:] != (len(spatial), len(spatial) + 1):
        raise ctx.error(f"theta {theta.shape} and size {size} must describe a 2-D or 3-D transform")
    axes = [_coordinates(s, bool(ctx.attr("align_corners", 0))) for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")  # (d,) h, w
    homogeneous = np.stack([*mesh[::-1], np.ones(mesh[0].shape)], -1)  # (x, y, (z,) 1) per position
    table = materialize(ctx.graph, "affine_grid_base", homogeneous.reshape(-1, len(spatial) + 1).astype(np.float32))
    grid = F.matmul(F.unsqueeze(F.cast(table, theta.dtype), 0), theta.transpose(1, 2))  # [N, positions, dims]
    return F.reshape(grid, [theta.shape[0], *spatial, len(spatial)])
