"""Element-wise arithmetic and math: Add .. Pow, Exp .. Erf, rounding, Cast. ONNX broadcasts like numpy and
never promotes (both operands share a type), so luminal's broadcasting operators apply as they are."""

from __future__ import annotations

import math

import luminal.functional as F
from luminal import dtypes as dt
from luminal.onnx import types
from luminal.onnx.context import NodeContext
from luminal.onnx.ops.common import clamp_to_finite, fold, require_float
from luminal.onnx.registry import translates
from luminal.tensor import Tensor


def _same_dtype(ctx: NodeContext, a: Tensor, b: Tensor) -> None:
    if a.dtype != b.dtype:
        raise ctx.error(f"operands must share one element type, got {a.dtype.name} and {b.dtype.name}")


def _binary(ctx: NodeContext) -> tuple[Tensor, Tensor]:
    a, b = ctx.x(0), ctx.x(1)
    _same_dtype(ctx, a, b)
    if a.dtype == dt.bool_:
        raise ctx.unsupported("bool operands are not supported (arithmetic needs numbers)")
    return a, b


@translates("Add")
def add(ctx: NodeContext) -> Tensor:
    return F.add(*_binary(ctx))


@translates("Sub")
def sub(ctx: NodeContext) -> Tensor:
    return F.sub(*_binary(ctx))


@translates("Mul")
def mul(ctx: NodeContext) -> Tensor:
    return F.mul(*_binary(ctx))


@translates("Div")
def div(ctx: NodeContext) -> Tensor:
    a, b = _binary(ctx)
    if a.dtype.is_int:
        return F.div(a, b, rounding_mode="trunc")  # integer Div truncates toward zero (C's /)
    return F.div(a, b)


@translates("Mod", attrs={"fmod"})
def mod(ctx: NodeContext) -> Tensor:
    a, b = _binary(ctx)
    if ctx.attr("fmod", 0):
        return F.fmod(a, b)  # the sign of the dividend, as C's fmod
    return F.remainder(a, b)  # the sign of the divisor, as Python's %


@translates("Pow")
def pow_(ctx: NodeContext) -> Tensor:
    """X ** Y with the type of X, whatever the type of Y."""
    x, y = ctx.x(0), ctx.x(1)
    if dt.bool_ in (x.dtype, y.dtype):
        raise ctx.unsupported("bool operands are not supported")
    if x.dtype.is_float:
        return F.cast(F.pow(x, F.cast(y, x.dtype) if y.dtype.is_float else y), x.dtype)
    if y.dtype.is_int:
        return F.cast(F.pow(x, F.cast(y, x.dtype)), x.dtype)
    # An integer base to a float power: computed in float, the result truncated to the base's type; a float
    # pow lands within rounding of an exact integer result (2 ** 3 as 7.9999995), so snap those first.
    r = F.pow(F.cast(x, dt.float32), F.cast(y, dt.float32))
    near = F.round(r)
    snapped = F.where(F.le(F.abs(F.sub(r, near)), F.mul(F.clamp(F.abs(r), min=1.0), 1e-5)), near, r)
    return F.cast(snapped, x.dtype)


@translates("Sum")
def sum_(ctx: NodeContext) -> Tensor:
    return fold(ctx.inputs(), F.add)


@translates("Mean")
def mean(ctx: NodeContext) -> Tensor:
    xs = ctx.inputs()
    require_float(ctx, xs[0])
    return F.div(fold(xs, F.add), len(xs))


# ---- unary math ---------------------------------------------------------------------------------------


def _unary(fn, floats_only: bool = True):
    def translate(ctx: NodeContext) -> Tensor:
        x = ctx.x(0)
        if floats_only:
            require_float(ctx, x)
        elif x.dtype == dt.bool_:
            raise ctx.unsupported("bool inputs are not supported")
        return fn(x)

    return translate


for _op, _fn in {
    "Exp": F.exp,
    "Log": F.log,
    "Sqrt": F.sqrt,
    "Reciprocal": F.reciprocal,
    "Sin": F.sin,
    "Cos": F.cos,
    "Tan": F.tan,
    "Erf": F.erf,
    "Floor": F.floor,
    "Ceil": F.ceil,
    "Round": F.round,  # half to even, as ONNX specifies
    "Sinh": lambda x: F.mul(F.sub(F.exp(x), F.exp(F.neg(x))), 0.5),  # (e^x - e^-x) / 2
    "Cosh": lambda x: F.mul(F.add(F.exp(x), F.exp(F.neg(x))), 0.5),  # (e^x + e^-x) / 2
    "Asinh": lambda x: F.log(F.add(x, F.sqrt(F.add(F.mul(x, x), 1.0)))),  # ln(x + sqrt(x^2 + 1))
    "Acosh": lambda x: F.log(F.add(x, F.sqrt(F.sub(F.mul(x, x), 1.0)))),  # ln(x + sqrt(x^2 - 1))
    "Atanh": lambda x: F.mul(F.log(F.div(F.add(x, 1.0), F.sub(1.0, x))), 0.5),  # ln((1 + x) / (1 - x)) / 2
}.items():
    translates(_op)(_unary(_fn))


@translates("Tanh")
def tanh(ctx: NodeContext) -> Tensor:
    """sign(x) (-expm1(-2|x|)) / (2 + expm1(-2|x|)): accurate near 0, where 1 - 2 / (e^2x + 1) cancels."""
    x = require_float(ctx, ctx.x(0))
    e = F.expm1(F.mul(F.abs(x), -2.0))
    return F.mul(F.sign(x), F.div(F.neg(e), F.add(e, 2.0)))


def _atan(x: Tensor) -> Tensor:
    """atan by reduction and a series: for |x| > 1, atan x = sign(x) pi / 2 - atan(1 / x); then three halvings
    atan y = 2 atan(y / (1 + sqrt(1 + y^2))) bring |y| below tan(pi / 16) ~ 0.2, where the odd Taylor series to
    y^21 is exact in float32."""
    big = F.gt(F.abs(x), 1.0)
    y = F.where(big, F.reciprocal(x), x)
    for _ in range(3):
        y = F.div(y, F.add(F.sqrt(F.add(F.mul(y, y), 1.0)), 1.0))
    y2, term, total = F.mul(y, y), y, y
    for k in range(1, 11):
        term = F.mul(term, F.neg(y2))
        total = F.add(total, F.div(term, 2 * k + 1))
    small = F.mul(total, 8.0)  # undo the three halvings
    return F.where(big, F.sub(F.mul(F.sign(x), math.pi / 2), small), small)


def _asin(x: Tensor) -> Tensor:
    return _atan(F.div(x, F.sqrt(F.sub(1.0, F.mul(x, x)))))  # asin x = atan(x / sqrt(1 - x^2))


for _op, _fn in {
    "Atan": _atan,
    "Asin": _asin,
    "Acos": lambda x: F.sub(math.pi / 2, _asin(x)),  # acos x = pi / 2 - asin x
}.items():
    translates(_op)(_unary(_fn))

translates("Abs")(_unary(F.abs, floats_only=False))
translates("Neg")(_unary(F.neg, floats_only=False))
translates("Sign")(_unary(F.sign, floats_only=False))


@translates("Identity")
def identity(ctx: NodeContext) -> Tensor:
    return ctx.x(0)


# ---- conversion -----------------------------------------------------------------------------------------


def _cast(ctx: NodeContext, x: Tensor, dtype: dt.DType) -> Tensor:
    """x as dtype. saturate (default 1) concerns 8- and 4-bit float targets only: it clamps to the type's largest
    finite value (inf included, nan kept) before the cast, which alone gives inf or nan out of range.
    round_mode concerns float8e8m0, which to_luminal refuses."""
    if dtype in dt.STORAGE_FLOATS and int(ctx.attr("saturate", 1)):
        if x.dtype in dt.STORAGE_ONLY:
            x = F.cast(x, dt.float32)  # exact; a storage type cannot be clamped itself
        x = clamp_to_finite(x, dtype)
    return F.cast(x, dtype)


@translates("Cast", attrs={"to", "saturate", "round_mode"})
def cast(ctx: NodeContext) -> Tensor:
    return _cast(ctx, ctx.x(0), types.to_luminal(int(ctx.attr("to")), "Cast target"))


@translates("CastLike", attrs={"saturate", "round_mode"})
def cast_like(ctx: NodeContext) -> Tensor:
    return _cast(ctx, ctx.x(0), ctx.x(1).dtype)
