"""Bit operations on every integer type, from integer arithmetic (luminal has no bit primitives):

shift left   a * 2^b, wrapping like the hardware does;     shift right  floor(a / 2^b) (arithmetic when signed)
not          -1 - a (two's complement);                    and, or, xor  bit by bit: bit k of a is
floor(a / 2^k) mod 2, and the result sums op(bit_k(a), bit_k(b)) 2^k, the top bit's 2^k wrapping to the
type's minimum, which is what makes negative results come out right. The top bit is a < 0 for a signed type and
a >= 2^(bits - 1) for an unsigned one (uint64 values from 2^63 up included: uint64 division is exact over the whole
range, luminal/hl/rounding.py).
"""

from __future__ import annotations

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import require_dtypes
from luminal.onnx.registry import translates
from luminal.tensor import Tensor

_INTS = dt.INTEGERS


def _power_of_two(like: Tensor, k) -> Tensor:
    """2^k in like's type (k a tensor of shifts below the width, or an int)."""
    if isinstance(k, Tensor):
        return F.pow(F.full_like(k, 2), k)
    return F.full_like(like, 1 << k if k < like.dtype.bits - 1 else -(1 << k))  # the top bit: the minimum


@translates("BitShift", attrs={"direction"})
def bit_shift(ctx: NodeContext) -> Tensor:
    a, b = require_dtypes(ctx, ctx.x(0), _INTS), ctx.x(1)
    width = a.dtype.bits
    b = F.cast(b, a.dtype)
    outside = F.logical_or(F.lt(b, 0), F.ge(b, width))
    direction = ctx.attr("direction")
    if direction == "LEFT":
        safe = F.where(outside, F.zeros_like(b), b)
        return F.where(outside, F.zeros_like(a), F.mul(a, _power_of_two(a, safe)))  # wraps as the shift does
    if direction != "RIGHT":
        raise ctx.error(f"direction must be LEFT or RIGHT, got {direction!r}")
    # 2^(width - 1) does not fit the type, so shift by at most width - 2 and then by the rest (0 or 1)
    first = F.clamp(b, 0, width - 2)
    rest = F.clamp(F.sub(b, first), 0, 1)
    shifted = F.floor_divide(F.floor_divide(a, _power_of_two(a, first)), _power_of_two(a, rest))
    sign_fill = F.where(F.lt(a, 0), F.full_like(a, -1), F.zeros_like(a))  # every bit shifted out
    return F.where(outside, sign_fill, shifted)


@translates("BitwiseNot")
def bitwise_not(ctx: NodeContext) -> Tensor:
    a = require_dtypes(ctx, ctx.x(0), _INTS)
    return F.sub(F.full_like(a, -1), a)  # ~a = -1 - a


def _bits(ctx: NodeContext, combine) -> Tensor:
    a, b = require_dtypes(ctx, ctx.x(0), _INTS), ctx.x(1)
    if a.dtype != b.dtype:
        raise ctx.error(f"operands must share one element type, got {a.dtype.name} and {b.dtype.name}")
    out = None
    for k in range(a.dtype.bits):
        scale = _power_of_two(a, k) if k < a.dtype.bits - 1 else None
        bit_a = F.remainder(F.floor_divide(a, scale), 2) if scale is not None else _top_bit(a)
        bit_b = F.remainder(F.floor_divide(b, scale), 2) if scale is not None else _top_bit(b)
        term = F.mul(combine(bit_a, bit_b), _power_of_two(a, k))
        out = term if out is None else F.add(out, term)
    return out


def _top_bit(a: Tensor) -> Tensor:
    top = F.lt(a, 0) if a.dtype.signed else F.ge(a, 1 << (a.dtype.bits - 1))
    return F.cast(top, a.dtype)


@translates("BitwiseAnd")
def bitwise_and(ctx: NodeContext) -> Tensor:
    return _bits(ctx, F.mul)  # both bits set


@translates("BitwiseOr")
def bitwise_or(ctx: NodeContext) -> Tensor:
    return _bits(ctx, lambda p, q: F.sub(F.add(p, q), F.mul(p, q)))  # p + q - pq


@translates("BitwiseXor")
def bitwise_xor(ctx: NodeContext) -> Tensor:
    return _bits(ctx, lambda p, q: F.remainder(F.add(p, q), 2))  # (p + q) mod 2
