"""Sampling grids: AffineGrid builds them, GridSample reads an input through them.

AffineGrid maps the normalised coordinates of every output position, in [-1, 1] (pixel centres, or corners
with align_corners), through theta: grid[n, (d,) h, w] = theta[n] @ (x, y, (z,) 1). The coordinate table
depends only on the size, so it is built at import; the transform is a matmul.
"""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
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


_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
CUBIC_A = -0.75  # Keys' kernel, as ONNX's GridSample fixes it


def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
    """Fold x back into [lo, hi] by reflecting off the borders as often as it takes."""
    span = hi - lo
    below, above = F.sub(lo, x), F.sub(x, hi)
    out = x
    for dist, near, far, outside in ((below, lo, hi, F.lt(x, lo)), (above, hi, lo, F.gt(x, hi))):
        bounces = F.floor(F.div(dist, span))
        rest = F.sub(dist, F.mul(bounces, span))
        even = F.eq(F.remainder(bounces, 2.0), 0.0)
        sign = 1.0 if near == lo else -1.0  # moving inward from the near border
        folded = F.where(even, F.add(F.mul(rest, sign), near), F.add(F.mul(rest, -sign), far))
        out = F.where(outside, folded, out)
    return out


def _cubic_weights(t: Tensor) -> list[Tensor]:
    def near(s):  # |s| <= 1
        return F.add(F.mul(F.mul(F.sub(F.mul(s, CUBIC_A + 2), CUBIC_A + 3), s), s), 1.0)

    def far(s):  # 1 < |s| < 2
        return F.sub(F.mul(F.add(F.mul(F.sub(F.mul(s, CUBIC_A), 5 * CUBIC_A), s), 8 * CUBIC_A), s), 4 * CUBIC_A)

    return [far(F.add(t, 1.0)), near(t), near(F.sub(1.0, t)), far(F.sub(2.0, t))]


@translates("GridSample", attrs={"align_corners", "mode", "padding_mode"})
def grid_sample(ctx: NodeContext) -> Tensor:
    """Y[n, c, p] = sum over taps of weight * X[n, c, tap] at the source coordinates grid[n, p] (x, y(, z)
    normalised to [-1, 1]); one Gather of X per tap, the taps' weights from the coordinates' fractions."""
    x, grid = require_float(ctx, ctx.x(0)), ctx.x(1)
    mode = _MODES.get(ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear"))
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise ctx.error(f"mode {ctx.attr('mode')!r} or padding_mode {padding!r} is not one ONNX defines")
    n, c, *dims = x.shape
    nd = len(dims)
    if not all(isinstance(d, int) for d in dims) or grid.shape[-1] != nd:
        raise ctx.error(f"input {x.shape} and grid {grid.shape} do not fit (or have symbolic spatial dims)")
    out = list(grid.shape[1:-1])
    grid = F.cast(grid, dt.float32)
    taps_per_dim = []
    for d, size in enumerate(dims):
        g = grid[..., nd - 1 - d]  # the grid lists x (the last axis) first
        pos = F.mul(F.add(g, 1.0), (size - 1) / 2) if align else F.div(F.sub(F.mul(F.add(g, 1.0), size), 1.0), 2.0)
        lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if mode == "nearest":
            pos = F.round(pos)  # half to even, as C's rint
        if padding == "border":
            pos = F.where(F.logical_or(F.lt(pos, lo), F.gt(pos, hi)), F.clamp(pos, 0.0, size - 1.0), pos)
        elif padding == "reflection":
            pos = _reflect(pos, lo, hi)
        if mode == "nearest":
            taps = [(F.cast(pos, dt.int64), None)]
        else:
            first = F.floor(pos)
            frac = F.sub(pos, first)
            first = F.cast(first, dt.int64)
            weights = [F.sub(1.0, frac), frac] if mode == "linear" else _cubic_weights(frac)
            offsets = [0, 1] if mode == "linear" else [-1, 0, 1, 2]
            taps = [(F.add(first, o), w) for o, w in zip(offsets, weights)]
        fixed = []
        for index, weight in taps:  # where a tap outside the input reads from, by padding_mode
            if padding == "zeros":
                inside = F.logical_and(F.ge(index, 0), F.lt(index, size))
                zero = F.zeros_like(grid[..., 0])
                weight = F.where(inside, weight if weight is not None else F.ones_like(zero), zero)
            elif padding == "reflection":
                index = F.cast(_reflect(F.cast(index, dt.float32), lo, hi), dt.int64)
            fixed.append((F.clamp(index, 0, size - 1), weight))
        taps_per_dim.append(fixed)
    flat = F.reshape(x, [n, c, -1])
    total = None
    strides = [int(np.prod(dims[d + 1 :])) for d in range(nd)]
    for combo in np.ndindex(*[len(t) for t in taps_per_dim]):
        index, weight = None, None
        for d, k in enumerate(combo):
            i, w = taps_per_dim[d][k]
            term = F.mul(i, strides[d]) if strides[d] != 1 else i
            index = term if index is None else F.add(index, term)
            weight = w if weight is None else (F.mul(weight, w) if w is not None else weight)
        index = F.expand(F.reshape(index, [n, 1, -1]), [n, c, index.numel() // n])
        picked = F.gather(flat, 2, index)
        if weight is not None:
            picked = F.mul(picked, F.cast(F.reshape(weight, [n, 1, -1]), x.dtype))
        total = picked if total is None else F.add(total, picked)
    return F.reshape(total, [n, c, *out])


def _roi_samples(roi, height: int, width: int, out_h: int, out_w: int, ratio: int, half_pixel: bool):
    """For one region: the 4 bilinear taps (flat positions, weights) of every sample point of every output
    bin, [out_h, out_w, samples, 4] each, and the sample count. A point outside the input reads nothing."""
    shift = 0.5 if half_pixel else 0.0
    x0, y0, x1, y1 = (float(v) for v in roi)
    start_w, start_h, end_w, end_h = x0 - shift, y0 - shift, x1 - shift, y1 - shift
    roi_w, roi_h = end_w - start_w, end_h - start_h
    if not half_pixel:
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    bin_h, bin_w = roi_h / out_h, roi_w / out_w
    grid_h = ratio if ratio > 0 else int(np.ceil(roi_h / out_h))
    grid_w = ratio if ratio > 0 else int(np.ceil(roi_w / out_w))
    samples = grid_h * grid_w
    pos = np.zeros((out_h, out_w, samples, 4), dtype=np.int64)
    weight = np.zeros((out_h, out_w, samples, 4), dtype=np.float64)
    for ph in range(out_h):
        for pw in range(out_w):
            for iy in range(grid_h):
                y = start_h + ph * bin_h + (iy + 0.5) * bin_h / grid_h
                for ix in range(grid_w):
                    x = start_w + pw * bin_w + (ix + 0.5) * bin_w / grid_w
                    s = iy * grid_w + ix
                    if y < -1.0 or y > height or x < -1.0 or x > width:
                        continue
                    y, x = max(y, 0.0), max(x, 0.0)
                    y_lo, x_lo = int(y), int(x)
                    if y_lo >= height - 1:
                        y_lo = y_hi = height - 1
                        y = float(y_lo)
                    else:
                        y_hi = y_lo + 1
                    if x_lo >= width - 1:
                        x_lo = x_hi = width - 1
                        x = float(x_lo)
                    else:
                        x_hi = x_lo + 1
                    ly, lx = y - y_lo, x - x_lo
                    pos[ph, pw, s] = [
                        y_lo * width + x_lo,
                        y_lo * width + x_hi,
                        y_hi * width + x_lo,
                        y_hi * width + x_hi,
                    ]
                    weight[ph, pw, s] = [(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx]
    return pos, weight, samples


@translates(
    "RoiAlign",
    attrs={"coordinate_transformation_mode", "mode", "output_height", "output_width", "sampling_ratio",
           "spatial_scale"},
)  # fmt: skip
def roi_align(ctx: NodeContext) -> Tensor:
    """Each region's bins averaged (or maxed) over bilinear samples. Where the samples fall depends on the
    regions (and their count too, with sampling_ratio 0), so rois and batch_indices must be known at import;
    the taps and weights are then tables, and X is read by one Gather."""
    x = require_float(ctx, ctx.x(0))
    rois = np.asarray(ctx.const(1, "rois"), dtype=np.float64) * float(ctx.attr("spatial_scale", 1.0))
    batch = np.asarray(ctx.const(2, "batch_indices")).astype(np.int64).reshape(-1)
    n, c, height, width = x.shape
    out_h, out_w = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    half_pixel = ctx.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise ctx.error(f"mode must be avg or max, got {mode!r}")
    ratio = int(ctx.attr("sampling_ratio", 0))
    per_roi = [_roi_samples(r, height, width, out_h, out_w, ratio, half_pixel) for r in rois]
    most = max((s for _, _, s in per_roi), default=1)
    r_count = len(per_roi)
    pos = np.zeros((r_count, out_h, out_w, most, 4), dtype=np.int64)
    weight = np.zeros((r_count, out_h, out_w, most, 4), dtype=np.float64)
    real = np.zeros((r_count, out_h, out_w, most), dtype=bool)  # samples a region really has (not padding)
    count = np.ones((r_count, 1, 1), dtype=np.float64)
    for k, (p, w, s) in enumerate(per_roi):
        pos[k, :, :, :s], weight[k, :, :, :s], real[k, :, :, :s] = p, w, True
        count[k] = max(s, 1)
    images = F.reshape(x[batch], [r_count, c, height * width])
    taps = F.reshape(materialize(x.graph, "roi_align_taps", pos), [r_count, 1, -1])
    values = F.gather(images, 2, F.expand(taps, [r_count, c, taps.shape[2]]))
    values = F.reshape(values, [r_count, c, out_h, out_w, most, 4])
    weighted = F.mul(values, F.unsqueeze(F.cast(materialize(x.graph, "roi_align_weights", weight.astype(np.float32)),
                                                x.dtype), 1))  # fmt: skip
    if mode == "avg":
        total = F.sum(weighted, [4, 5])
        return F.div(total, F.unsqueeze(F.cast(materialize(x.graph, "roi_align_count", count.astype(np.float32)),
                                               x.dtype), 1))  # fmt: skip
    best = F.amax(weighted, -1)  # [R, C, out_h, out_w, samples]
    kept = F.unsqueeze(materialize(x.graph, "roi_align_real", real), 1)
    return F.amax(F.where(kept, best, F.full_like(best, float("-inf"))), -1)
