"""Resize (and the older Upsample): nearest, linear and cubic interpolation with ONNX's coordinate modes.

Interpolation is separable and linear in the data, so each resized axis is one matrix W[out, in] applied
along that axis (a matmul), its rows the interpolation weights of one output position. The weights come
from the geometry alone (sizes, scales, attributes), known at import, and are computed here in float64:
  x_ori   the source coordinate of output position x, by coordinate_transformation_mode;
  taps    n consecutive source indices around x_ori (2 linear, 4 cubic, wider for antialiased
          downsampling), clamped to the edge; an exact integer x_ori counts as ratio 1 from the left;
  weights nearest (one tap by nearest_mode), linear (1 - r, r), cubic (Keys' kernel with cubic_coeff_a),
          or the antialiased kernels stretched by 1 / scale, and exclude_outside renormalising without
          the taps outside the input.
tf_crop_and_resize positions outside the region of interest read extrapolation_value.
"""

from __future__ import annotations

import math

import numpy as np

import luminal.functional as F
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis
from luminal.onnx.registry import translates
from luminal.onnx.scope import materialize
from luminal.tensor import Tensor

_RESIZE_ATTRS = {
    "antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
    "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode",
}  # fmt: skip


def _source_coordinates(mode: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float]):
    """x_ori for every output position, and which positions fall outside a tf_crop_and_resize region."""
    x = np.arange(n_out, dtype=np.float64)
    out_len = scale * n_in  # the real-valued output length the scale implies
    outside = np.zeros(n_out, dtype=bool)
    if mode == "align_corners":
        x_ori = np.zeros(n_out) if out_len == 1 else x * (n_in - 1) / (out_len - 1)
    elif mode == "asymmetric":
        x_ori = x / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi
        if out_len == 1:
            x_ori = np.full(n_out, (end - start) * (n_in - 1) / 2)
        else:
            x_ori = x * (end - start) * (n_in - 1) / (out_len - 1)
        x_ori = x_ori + start * (n_in - 1)
        outside = (x_ori < 0) | (x_ori > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x_ori = np.full(n_out, -0.5) if out_len == 1 else (x + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x_ori = (x + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / out_len)  # centres the output when n_out is rounded from out_len
        x_ori = offset + (x + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")
    return x_ori, outside


def _nearest(ratio: float, rule: str) -> list[float]:
    if ratio == 1.0:
        return [0.0, 1.0]
    pick_right = {
        "round_prefer_floor": ratio > 0.5,
        "round_prefer_ceil": ratio >= 0.5,
        "floor": False,
        "ceil": True,
    }[rule]
    return [0.0, 1.0] if pick_right else [1.0, 0.0]


def _cubic(ratio: float, a: float) -> list[float]:
    """Keys' cubic convolution kernel at distances 1 + r, r, 1 - r, 2 - r."""

    def near(t: float) -> float:  # |t| <= 1
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t: float) -> float:  # 1 < |t| < 2
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

    return [far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)]


def _antialiased(ratio: float, scale: float, kind: str, a: float) -> list[float]:
    """The linear or cubic kernel widened by 1 / scale when downsampling, normalised to sum 1."""
    scale = min(scale, 1.0)
    reach = 1 if kind == "linear" else 2
    first = math.floor(-reach / scale) + 1
    taps = range(first, 2 - first) if kind == "cubic" else range(first, first + 2 - 2 * first)

    def kernel(t: float) -> float:
        t = abs(t)
        if kind == "linear":
            return min(max(1 - t, 0.0), 1.0)
        if t <= 1:
            return (a + 2) * t**3 - (a + 3) * t**2 + 1
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a if t < 2 else 0.0

    weights = [kernel(scale * (i - ratio)) for i in taps]
    total = sum(weights)
    return [w / total for w in weights]


def interpolation_matrix(n_in: int, n_out: int, scale: float, attrs: dict, roi=(0.0, 1.0)):
    """(W [n_out, n_in], outside [n_out]): output position o = sum_i W[o, i] input[i]."""
    mode = attrs.get("mode", "nearest")
    a = attrs.get("cubic_coeff_a", -0.75)
    x_ori, outside = _source_coordinates(attrs.get("coordinate_transformation_mode", "half_pixel"), n_in, n_out,
                                         scale, roi)  # fmt: skip
    w = np.zeros((n_out, n_in), dtype=np.float64)
    for o, x in enumerate(x_ori):
        if outside[o]:
            continue
        whole = math.floor(x)
        ratio = 1.0 if x == whole else x - whole
        if mode == "nearest":
            coeffs = _nearest(ratio, attrs.get("nearest_mode", "round_prefer_floor"))
        elif attrs.get("antialias", 0):
            coeffs = _antialiased(ratio, scale, mode, a)
        elif mode == "linear":
            coeffs = [1 - ratio, ratio]
        else:
            coeffs = _cubic(ratio, a)
        n = len(coeffs)
        # n taps centred on x; at an exact integer the window leans left (ratio 1 from the tap before)
        start = (int(x) - n // 2) if x == whole else whole - n // 2 + 1
        taps = np.arange(start, start + n)
        coeffs = np.asarray(coeffs, dtype=np.float64)
        if attrs.get("exclude_outside", 0):
            coeffs = np.where((taps < 0) | (taps >= n_in), 0.0, coeffs)
            total = coeffs.sum()
            coeffs = coeffs / (total if total != 0 else 1.0)
        np.add.at(w[o], np.clip(taps, 0, n_in - 1), coeffs)  # the edge value stands in beyond the input
    return w, outside


def resize_axis(x: Tensor, d: int, w: np.ndarray, outside: np.ndarray, fill: float) -> Tensor:
    """Apply W along axis d: move it last, multiply by W^T [in, out], move it back."""
    weights = materialize(x.graph, "resize_weights", w.T.astype(np.float32))
    y = F.matmul(F.cast(F.movedim(x, d, -1), weights.dtype), weights)
    if outside.any():
        y = F.add(y, materialize(x.graph, "resize_fill", outside.astype(np.float32) * fill))
    return F.cast(F.movedim(y, -1, d), x.dtype)


@translates("Resize", attrs=_RESIZE_ATTRS)
def resize(ctx: NodeContext) -> Tensor:
    x = ctx.x(0)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{x.dtype.name} inputs are not supported (floating-point only)")
    if not all(isinstance(n, int) for n in x.shape):
        raise ctx.unsupported(f"symbolic dims {x.shape} are not supported")
    attrs = dict(ctx.attrs)
    if ctx.opset < 11:  # Resize-10: X and scales only, sampling like Upsample
        attrs.setdefault("coordinate_transformation_mode", "asymmetric")
        attrs.setdefault("nearest_mode", "floor")
        scales = [float(s) for s in np.asarray(ctx.const(1, "scales")).reshape(-1)]
        return _resize(ctx, x, attrs, scales, None, None)
    roi = np.asarray(ctx.const(1, "roi"), dtype=np.float64).reshape(-1) if ctx.has(1) else None
    scales = ctx.const(2, "scales") if ctx.has(2) else None
    scales = [float(s) for s in np.asarray(scales).reshape(-1)] if scales is not None and scales.size else None
    sizes = ctx.ints(3, "sizes") if ctx.has(3) else None
    return _resize(ctx, x, attrs, scales, sizes, roi if roi is not None and roi.size else None)


def _resize(ctx: NodeContext, x: Tensor, attrs: dict, scales, sizes, roi) -> Tensor:
    rank = x.ndim
    dims = [axis(ctx, a, rank) for a in attrs.get("axes", range(rank))]
    if (scales is None) == (sizes is None):
        raise ctx.error("exactly one of scales and sizes must be given")
    if attrs.get("mode", "nearest") not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"mode must be nearest, linear or cubic, got {attrs.get('mode')!r}")
    shape = list(x.shape)
    if sizes is not None:
        factors = {d: sizes[k] / shape[d] for k, d in enumerate(dims)}
        outs = {d: sizes[k] for k, d in enumerate(dims)}
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy in ("not_larger", "not_smaller"):
            one = (min if policy == "not_larger" else max)(factors.values())
            factors = dict.fromkeys(dims, one)
            outs = {d: int(one * shape[d] + 0.5) for d in dims}  # rounded half up
        elif policy != "stretch":
            raise ctx.error(f"keep_aspect_ratio_policy must be stretch, not_larger or not_smaller, got {policy!r}")
    else:
        factors = {d: scales[k] for k, d in enumerate(dims)}
        outs = {d: int(scales[k] * shape[d]) for k, d in enumerate(dims)}
    fill = attrs.get("extrapolation_value", 0.0)
    for k, d in enumerate(dims):
        region = (float(roi[k]), float(roi[len(dims) + k])) if roi is not None else (0.0, 1.0)
        trivial = math.isclose(factors[d], 1.0) and outs[d] == shape[d] and region == (0.0, 1.0)
        if trivial:
            continue
        w, outside = interpolation_matrix(shape[d], outs[d], factors[d], attrs, region)
        x = resize_axis(x, d, w, outside, fill)
    return x


@translates("Upsample", attrs={"mode", "scales"})
def upsample(ctx: NodeContext) -> Tensor:
    """The deprecated Upsample: Resize with asymmetric coordinates, nearest rounding down."""
    x = ctx.x(0)
    scales = ctx.attr("scales") if ctx.opset < 9 else [float(s) for s in np.asarray(ctx.const(1, "scales")).ravel()]
    attrs = {"mode": ctx.attr("mode", "nearest"), "coordinate_transformation_mode": "asymmetric",
             "nearest_mode": "floor"}  # fmt: skip
    return _resize(ctx, x, attrs, list(scales), None, None)
