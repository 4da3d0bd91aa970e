"""Quantized ONNX as compositions of high-level ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

    quantize    q = saturate(round_half_even(x / scale) + zero_point)       (in the zero point's type)
    dequantize  x = (q - zero_point) * scale
    integer ops (a - a_zero) (op) (b - b_zero), accumulated in int32; the QLinear ones then requantize with the
                scale a_scale b_scale / y_scale

A scale or zero point is a scalar (per tensor) or a 1-D tensor along one axis (per axis: `axis` for
(De)QuantizeLinear, A's rows and B's columns for the matmuls, output channels for a convolution's weights).
Blocked quantization (block_size > 0) is refused by name.
"""

from __future__ import annotations

import numpy as np

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx import types
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import axis, clamp_to_finite, require_dtypes
from luminal.onnx.ops.nn import convolve
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

# the types ONNX quantizes to: integers (rounded half to even, saturated) and 8- and 4-bit floats (a saturating cast)
QUANTIZED = (dt.int8, dt.uint8, dt.int16, dt.uint16, dt.int32, *dt.STORAGE_ONLY)


def _along(ctx: NodeContext, t: Tensor, rank: int, a: int, what: str) -> Tensor:
    """A scalar (or one value) as a scalar; a 1-D tensor shaped to broadcast along axis `a` of a rank-`rank`
    tensor (`a` is checked only then: a per-tensor scale ignores the axis)."""
    if t.ndim == 0 or (t.ndim == 1 and t.shape[0] == 1):
        return t.reshape(())
    if t.ndim != 1:
        raise ctx.unsupported(f"{what} of shape {t.shape} is not supported (a scalar or 1-D per axis)")
    a = axis(ctx, a, rank)
    return t.reshape([-1 if k == a else 1 for k in range(rank)])


def _float_bounds(dtype: dt.DType) -> tuple[float, float]:
    """The type's range as float32 values inside it (int32's maximum rounds up to 2^31 as a float32)."""
    hi = np.float32(dtype.max)
    if int(hi) > dtype.max:
        hi = np.nextafter(hi, np.float32(0))
    return float(dtype.min), float(hi)


def _saturate(v: Tensor, dtype: dt.DType) -> Tensor:
    """A float32 tensor of integral values clamped to `dtype`'s range and converted."""
    lo, hi = _float_bounds(dtype)
    return F.cast(F.clamp(v, lo, hi), dtype)


def _rounded(v: Tensor, zero: Tensor | None, dtype: dt.DType) -> Tensor:
    """saturate(round(v) + zero) for a float32 v: rounded half to even, as ONNX specifies."""
    q = F.round(v)
    return _saturate(q if zero is None else F.add(q, F.cast(zero, dt.float32)), dtype)


def _quantize(x: Tensor, scale: Tensor, zero: Tensor | None, dtype: dt.DType, saturate: bool = True) -> Tensor:
    v = _divide(F.cast(x, dt.float32), F.cast(scale, dt.float32))
    if dtype.is_float:  # float8/float4: x / scale + zero, rounded by the cast itself; saturate clamps first
        v = v if zero is None else F.add(v, F.cast(zero, dt.float32))
        return F.cast(clamp_to_finite(v, dtype) if saturate else v, dtype)
    return _rounded(v, zero, dtype)


def _split(a: Tensor) -> tuple[Tensor, Tensor]:
    """a = hi + lo exactly, each with at most 12 significant bits (Veltkamp: 4097 = 2^12 + 1)."""
    c = F.mul(a, 4097.0)
    hi = F.sub(c, F.sub(c, a))
    return hi, F.sub(a, hi)


def _divide(x: Tensor, s: Tensor) -> Tensor:
    """x / s correctly rounded in float32. Luminal divides as x * (1 / s), which can land on the other side of
    a rounding tie: -2.5 / (5.5 / 255) is -127.49999 but -2.5 * (255 / 5.5) is -127.5, one step apart once
    rounded. One Newton step on the exact remainder x - q s (Dekker's product) corrects q (-ffp-contract=off
    keeps every step rounded as written)."""
    r = F.reciprocal(s)
    q = F.mul(x, r)
    p = F.mul(q, s)
    (qh, ql), (sh, sl) = _split(q), _split(s)
    p_low = F.add(F.add(F.add(F.sub(F.mul(qh, sh), p), F.mul(qh, sl)), F.mul(ql, sh)), F.mul(ql, sl))
    remainder = F.sub(F.sub(x, p), p_low)  # x - q s, exact
    return F.add(q, F.mul(remainder, r))


def _block_size(ctx: NodeContext) -> None:
    if int(ctx.attr("block_size", 0)) > 0:
        raise ctx.unsupported("blocked quantization (block_size > 0) is not supported")


@translates("QuantizeLinear", attrs={"axis", "block_size", "output_dtype", "saturate", "precision"})
def quantize_linear(ctx: NodeContext) -> Tensor:
    _block_size(ctx)
    x = ctx.x(0)
    a = int(ctx.attr("axis", 1))
    zero = ctx.x(2) if ctx.has(2) else None
    if zero is not None:
        dtype = zero.dtype
    elif ctx.attr("output_dtype", 0):
        dtype = types.to_luminal(int(ctx.attr("output_dtype")), "QuantizeLinear output_dtype")
    else:
        dtype = dt.uint8  # ONNX's default without a zero point
    if dtype not in QUANTIZED:
        raise ctx.unsupported(
            f"quantizing to {dtype.name} is not supported ({', '.join(d.name for d in QUANTIZED)} are)"
        )
    scale = _along(ctx, ctx.x(1), x.ndim, a, "y_scale")
    zero = None if zero is None else _along(ctx, zero, x.ndim, a, "y_zero_point")
    return _quantize(x, scale, zero, dtype, saturate=bool(int(ctx.attr("saturate", 1))))


@translates("DequantizeLinear", attrs={"axis", "block_size", "output_dtype"})
def dequantize_linear(ctx: NodeContext) -> Tensor:
    _block_size(ctx)
    q, scale = require_dtypes(ctx, ctx.x(0), QUANTIZED), ctx.x(1)
    a = int(ctx.attr("axis", 1))
    wide = dt.float32 if q.dtype.is_float else dt.int64  # a float8 zero point subtracts in float32, exactly
    centred = F.cast(q, wide)
    if ctx.has(2):
        centred = F.sub(centred, F.cast(_along(ctx, ctx.x(2), q.ndim, a, "x_zero_point"), wide))
    y = F.mul(F.cast(centred, dt.float32), F.cast(_along(ctx, scale, q.ndim, a, "x_scale"), dt.float32))
    return F.cast(y, scale.dtype)  # (q - zero_point) * scale, in the scale's type


@translates("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext) -> tuple[Tensor, Tensor, Tensor]:
    """uint8 with the range [min(x, 0), max(x, 0)] spread over 0..255: scale = range / 255, and the zero point
    is the rounded position of 0 (so 0 quantizes exactly)."""
    x = F.cast(ctx.x(0), dt.float32)
    low, high = F.minimum(x.amin(), 0.0), F.maximum(x.amax(), 0.0)
    scale = F.div(F.sub(high, low), 255.0)
    zero = _rounded(F.neg(F.div(low, scale)), None, dt.uint8)  # qmin - low / scale, qmin = 0
    return _quantize(x, scale, zero, dt.uint8), scale, zero


def _centred(ctx: NodeContext, t: Tensor, zero_index: int, a: int, what: str) -> Tensor:
    """t - zero_point in int32 (the zero point along axis `a` of t when it is 1-D)."""
    t = F.cast(require_dtypes(ctx, t, [d for d in QUANTIZED if d.is_int]), dt.int32)  # integer GEMMs only
    if not ctx.has(zero_index):
        return t
    return F.sub(t, F.cast(_along(ctx, ctx.x(zero_index), t.ndim, a, what), dt.int32))


def _requantize(ctx: NodeContext, acc: Tensor, scale: Tensor, y_scale: int, y_zero: int) -> Tensor:
    """An int32 accumulator at `scale`, as the output type at the output's scale and zero point."""
    zero = ctx.x(y_zero)
    ratio = _divide(scale, F.cast(ctx.x(y_scale), dt.float32))  # as ONNX Runtime: a_scale b_scale / y_scale
    return _rounded(F.mul(F.cast(acc, dt.float32), ratio), zero, zero.dtype)


@translates("MatMulInteger")
def matmul_integer(ctx: NodeContext) -> Tensor:
    """(A - a_zero) @ (B - b_zero) in int32; a 1-D a_zero is per row of A, a 1-D b_zero per column of B."""
    return F.matmul(_centred(ctx, ctx.x(0), 2, -2, "a_zero_point"), _centred(ctx, ctx.x(1), 3, -1, "b_zero_point"))


@translates("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext) -> Tensor:
    a, b = ctx.x(0), ctx.x(3)
    acc = F.matmul(_centred(ctx, a, 2, -2, "a_zero_point"), _centred(ctx, b, 5, -1, "b_zero_point"))
    a_scale = F.cast(_along(ctx, ctx.x(1), a.ndim, a.ndim - 2, "a_scale"), dt.float32)
    b_scale = F.cast(_along(ctx, ctx.x(4), b.ndim, b.ndim - 1, "b_scale"), dt.float32)
    return _requantize(ctx, acc, F.mul(a_scale, b_scale), 6, 7)


_CONV_ATTRS = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}


@translates("ConvInteger", attrs=_CONV_ATTRS)
def conv_integer(ctx: NodeContext) -> Tensor:
    """conv(x - x_zero, w - w_zero) in int32; a 1-D w_zero is per output channel. Padding reads 0 after the
    zero point is taken off: the zero point itself before, as ONNX pads."""
    return convolve(
        ctx, _centred(ctx, ctx.x(0), 2, 1, "x_zero_point"), _centred(ctx, ctx.x(1), 3, 0, "w_zero_point"), None
    )


@translates("QLinearConv", attrs=_CONV_ATTRS)
def qlinear_conv(ctx: NodeContext) -> Tensor:
    x, w = ctx.x(0), ctx.x(3)
    bias = F.cast(ctx.x(8), dt.int32) if ctx.has(8) else None  # already at scale x_scale w_scale
    acc = convolve(ctx, _centred(ctx, x, 2, 1, "x_zero_point"), _centred(ctx, w, 5, 0, "w_zero_point"), bias)
    w_scale = F.cast(_along(ctx, ctx.x(4), acc.ndim, 1, "w_scale"), dt.float32)  # per output channel
    return _requantize(ctx, acc, F.mul(F.cast(ctx.x(1), dt.float32), w_scale), 6, 7)
