"""Nearest-neighbour upsampling: a gather of source rows and columns whose positions are known at import."""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.torch.call import Call
from luminal.torch.registry import translates


def _nearest_sources(size_in: int, size_out: int, scale: float | None) -> list[int]:
    """torch's nearest rule: source = min(floor(o * s), in - 1), s = 1 / scale_factor when one was given and
    in / out otherwise, computed in float32 as torch's CPU kernel does."""
    s = np.float32(1.0 / scale) if scale else np.float32(size_in) / np.float32(size_out)
    return [min(int(np.floor(np.float32(o) * s)), size_in - 1) for o in range(size_out)]


def _upsample(c: Call, spatial: int, output_size, scales):
    x = c["input"] if "input" in c.args else c["self"]
    sizes = list(x.shape[-spatial:])
    if not all(isinstance(n, int) for n in sizes):
        raise c.unsupported(f"symbolic spatial sizes {sizes} are not supported")
    scales = list(scales) if scales else [None] * spatial
    outs = list(output_size) if output_size else [int(np.floor(n * s)) for n, s in zip(sizes, scales)]
    for k, (n, out, scale) in enumerate(zip(sizes, outs, scales)):
        if out != n:
            axis = x.ndim - spatial + k
            index = F.tensor(x.graph, _nearest_sources(n, out, scale), dtype=dt.int64)
            x = F.index_select(x, axis, index)
    return x


@translates("aten.upsample_nearest1d.vec", "aten.upsample_nearest2d.vec")
def upsample_nearest_vec(c: Call):
    spatial = 1 if "1d" in c.name else 2
    return _upsample(c, spatial, c.get("output_size"), c.get("scale_factors"))


@translates("aten.upsample_nearest2d.default")
def upsample_nearest2d(c: Call):
    scales = [c.get("scales_h"), c.get("scales_w")]
    return _upsample(c, 2, c["output_size"], scales if all(scales) else None)


@translates("aten.upsample_bilinear2d.vec", "aten.upsample_linear1d.vec")
def upsample_linear_vec(c: Call):
    """(Bi)linear resizing as one interpolation matrix per axis, built by the ONNX importer's Resize helpers:
    torch's source coordinate is (o + 0.5) / scale - 0.5 clamped at 0 (ONNX "half_pixel", whose edge taps
    clamp the same way) or o (in - 1) / (out - 1) with align_corners. torch's scale is the scale factor when
    one was given, else out / in."""
    try:
        from luminal.onnx.ops.resize import interpolation_matrix, resize_axis
    except ImportError as e:  # luminal.onnx needs the onnx package
        raise c.unsupported(f"linear interpolation reuses luminal.onnx, which cannot be imported ({e})") from None
    x = c["input"]
    spatial = 2 if "bilinear2d" in c.name else 1
    sizes = list(x.shape[-spatial:])
    if not all(isinstance(n, int) for n in sizes):
        raise c.unsupported(f"symbolic spatial sizes {sizes} are not supported")
    factors = list(c["scale_factors"]) if c.get("scale_factors") else [None] * spatial
    outs = list(c["output_size"]) if c.get("output_size") else [int(np.floor(n * f)) for n, f in zip(sizes, factors)]
    mode = "align_corners" if c["align_corners"] else "half_pixel"
    for k, (n, out, factor) in enumerate(zip(sizes, outs, factors)):
        scale = out / n if mode == "align_corners" or not factor else factor
        w, outside = interpolation_matrix(n, out, scale, {"mode": "linear", "coordinate_transformation_mode": mode})
        x = resize_axis(x, x.ndim - spatial + k, w, outside, 0.0)
    return x
