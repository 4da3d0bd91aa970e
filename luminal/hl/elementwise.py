"""Element-wise arithmetic, math functions and dtype conversion, with PyTorch's names and semantics.

Each op is a composition of primitives, written once, with its identity as a comment. Two conventions:
- float math on int/bool inputs computes in float32, and on float16/bfloat16 computes in float32 and rounds
  once at the end, as torch's CPU kernels do (`opmath`; float64 computes in float64); single primitives need
  no such care (the primitive itself rounds once).
- powers, rounding and division with rounding live in rounding.py; integer results stay integer and exact.
"""

from __future__ import annotations

import math
from builtins import bool as _bool
from builtins import float as _float
from typing import Any, Callable

from luminal import dtypes as dt
from luminal.hl import comparison as C
from luminal.hl import prim
from luminal.hl.prim import operands
from luminal.tensor import Tensor

LOG2_E = 1 / math.log(2)  # exp(x) = 2 ** (x * log2(e))
LN_2 = math.log(2)  # ln(x) = log2(x) * ln(2)
F32_EXACT = 2.0**23  # every float32 at or beyond this magnitude is an integer


def opmath(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn computed in float32 (float64 in float64): ints and bools become float32 (torch); half types round back
    at the end."""
    x = prim.float_operand(x)
    compute = dt.opmath(x.dtype)
    return fn(x) if x.dtype == compute else prim.cast(fn(prim.cast(x, compute)), x.dtype)


def opmath2(a: Any, b: Any, op: str, fn: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    a, b = operands(a, b, op)
    d = a.dtype if a.dtype.is_float else dt.float32
    compute = dt.opmath(d)
    return prim.cast(fn(prim.cast(a, compute), prim.cast(b, compute)), d)


def _c(x: Tensor, value: Any) -> Tensor:
    return prim.full_like(x, value)  # a constant of x's dtype and shape


def _no_bool(x: Tensor, op: str) -> None:
    if x.dtype == dt.bool_:
        raise dt.DTypeError(f"{op} is not defined on bool tensors (torch raises too); cast first")


def _mask(p: Tensor, like: Tensor) -> Tensor:
    return prim.cast(p, like.dtype)  # bool -> 0/1 in like's dtype


# ---- arithmetic ----------------------------------------------------------------------------------------


def _scaled(b: Tensor, alpha: Any, op: str) -> Tensor:
    if isinstance(alpha, _bool) and b.dtype != dt.bool_ or isinstance(alpha, _float) and not b.dtype.is_float:
        raise dt.DTypeError(f"{op}: alpha={alpha!r} does not fit {b.dtype.name} operands")
    return b if alpha == 1 else prim.mul(b, _c(b, alpha))


def add(a: Any, b: Any, *, alpha: Any = 1) -> Tensor:
    a, b = operands(a, b, "add")
    return prim.add(a, _scaled(b, alpha, "add"))  # a + alpha b (or on bool)


def mul(a: Any, b: Any) -> Tensor:
    return prim.mul(*operands(a, b, "mul"))  # (and on bool)


def neg(x: Tensor) -> Tensor:
    _no_bool(x, "neg (use logical_not)")
    return prim.mul(x, _c(x, -1))  # -x = x * -1


def sub(a: Any, b: Any, *, alpha: Any = 1) -> Tensor:
    a, b = operands(a, b, "sub")
    _no_bool(a, "sub (use logical_xor)")
    return prim.add(a, neg(_scaled(b, alpha, "sub")))  # a - alpha b = a + (-1 * alpha b)


def square(x: Tensor) -> Tensor:
    x = prim.cast(x, dt.int64) if x.dtype == dt.bool_ else x  # torch squares bools as int64
    return prim.mul(x, x)


def reciprocal(x: Tensor) -> Tensor:
    return prim.recip(prim.float_operand(x))


def div(a: Any, b: Any, *, rounding_mode: str | None = None) -> Tensor:
    """a / b; rounding_mode "trunc" rounds toward zero, "floor" toward -inf (integers stay integers)."""
    if rounding_mode is not None:
        from luminal.hl import rounding  # (rounding builds on this module)

        if rounding_mode == "floor":
            return rounding.floor_divide(a, b)
        if rounding_mode == "trunc":
            return rounding.trunc_divide(a, b)
    if rounding_mode is not None:
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return opmath2(a, b, "div", lambda a, b: prim.mul(a, prim.recip(b)))  # a / b = a * (1 / b)


true_divide = div


def addcmul(x: Tensor, t1: Any, t2: Any, *, value: Any = 1) -> Tensor:
    return add(x, mul(_scaled_operand(t1, value, x, t2), t2))  # x + value t1 t2


def addcdiv(x: Tensor, t1: Any, t2: Any, *, value: Any = 1) -> Tensor:
    if all(isinstance(t, Tensor) and not t.dtype.is_float for t in (t1, t2)):
        raise dt.DTypeError("addcdiv: integer division is not supported (torch raises too); cast to float")
    return add(x, div(_scaled_operand(t1, value, x, t2), t2))  # x + value t1 / t2


def _scaled_operand(t: Any, value: Any, *others: Any) -> Tensor:
    d = C.result_type(t, *others)
    return _scaled(prim.cast(t, d), value, "value")


def lerp(start: Tensor, end: Any, weight: Any) -> Tensor:
    """start + weight (end - start), computed from the nearer end as torch does (exact at weight 0 and 1)."""
    _float_only(start, "lerp")
    if not isinstance(weight, Tensor):
        return opmath2(start, end, "lerp", lambda s, e: _lerp_from(s, e, weight, math.fabs(weight) < 0.5))
    s, e = operands(start, end, "lerp")
    w = prim.cast(weight, s.dtype)
    return C.where(C.lt(abs(w), 0.5), _lerp_from(s, e, w, True), _lerp_from(s, e, w, False))


def _lerp_from(s: Tensor, e: Tensor, w: Any, near_start: _bool) -> Tensor:
    if near_start:
        return add(s, mul(w, sub(e, s)))  # s + w (e - s)
    return sub(e, mul(sub(e, s), sub(1, w) if isinstance(w, Tensor) else 1 - w))  # e - (e - s)(1 - w)


def _float_only(x: Tensor, op: str) -> None:
    if not x.dtype.is_float:
        raise dt.DTypeError(f"{op} needs a floating-point tensor, got {x.dtype.name}")


# ---- sign and magnitude --------------------------------------------------------------------------------


def sign(x: Tensor) -> Tensor:
    if x.dtype == dt.bool_:
        return x
    zero = _c(x, 0)
    return prim.add(_mask(prim.less_than(zero, x), x), neg(_mask(prim.less_than(x, zero), x)))  # (0 < x) - (x < 0)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - torch's name
    _no_bool(x, "abs")
    return prim.mul(x, sign(x))  # |x| = x sign(x); nan stays nan (sign(nan) = 0, nan * 0 = nan)


# ---- exponentials, logarithms, trigonometry ------------------------------------------------------------


def exp2(x: Tensor) -> Tensor:
    return prim.exp2(prim.float_operand(x))


def log2(x: Tensor) -> Tensor:
    return prim.log2(prim.float_operand(x))


def exp(x: Tensor) -> Tensor:
    return opmath(x, lambda x: prim.exp2(mul(x, LOG2_E)))  # e^x = 2^(x log2 e)


def log(x: Tensor) -> Tensor:
    return opmath(x, lambda x: mul(prim.log2(x), LN_2))  # ln x = log2(x) ln 2


def log10(x: Tensor) -> Tensor:
    return opmath(x, lambda x: mul(prim.log2(x), math.log10(2)))  # log10 x = log2(x) log10 2


def log1p(x: Tensor) -> Tensor:
    """ln(1 + x), accurate for tiny x: ln(u) x / (u - 1) with u = 1 + x cancels u's rounding (Goldberg)."""

    def f(x: Tensor) -> Tensor:
        u = add(x, 1)
        d = sub(u, 1)
        exact = C.logical_or(C.eq(d, 0), C.eq(x, math.inf))  # 1 + x rounds to 1, or x = inf: the answer is x
        return C.where(exact, x, mul(log(u), div(x, d)))

    return opmath(x, f)


def expm1(x: Tensor) -> Tensor:
    """e^x - 1, accurate for tiny x: (u - 1) x / ln(u) with u = e^x cancels u's rounding (Kahan)."""

    def f(x: Tensor) -> Tensor:
        u = exp(x)
        um1 = sub(u, 1)
        saturated = C.logical_or(C.eq(u, 0), C.eq(u, math.inf))  # there u - 1 itself is the answer
        return C.where(C.eq(u, 1), x, C.where(saturated, um1, mul(um1, div(x, log(u)))))

    return opmath(x, f)


def sqrt(x: Tensor) -> Tensor:
    return prim.sqrt(prim.float_operand(x))


def rsqrt(x: Tensor) -> Tensor:
    return prim.recip(sqrt(x))  # 1 / sqrt(x)


def sin(x: Tensor) -> Tensor:
    return prim.sin(prim.float_operand(x))


def cos(x: Tensor) -> Tensor:
    # cos x = 1 - 2 sin^2(x / 2): unlike sin(x + pi/2) it adds no rounding to large arguments
    return opmath(x, lambda x: sub(1, mul(square(prim.sin(mul(x, 0.5))), 2)))


def tan(x: Tensor) -> Tensor:
    return opmath(x, lambda x: div(prim.sin(x), cos(x)))  # tan = sin / cos


# tanh's Taylor series x - x^3/3 + 2x^5/15 - ...: its odd coefficients after x, in powers of x^2
_TANH_SERIES = (-1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925)
# |x| below which the series' first dropped term (~0.0036 x^13) is under the type's rounding: float32's, and
# float64's (where the closed form's cancellation above it costs at most eps / |x|, 3e-15)
_TANH_SERIES_BELOW = {dt.float32: 0.25, dt.float64: 0.07}


def tanh(x: Tensor) -> Tensor:
    """tanh x = 1 - 2 / (e^2x + 1), but near 0 that cancels to a few correct bits: there the series.

    `where` compiles to an element-wise select (compiler/kernels/lower_select.py), so a GEMM's epilogue still computes
    it all (GPT-2's GELU); the branch not chosen may overflow (the series at large x) without harm."""

    def f(x: Tensor) -> Tensor:
        x2 = mul(x, x)
        poly = _c(x, 0.0)
        for a in reversed(_TANH_SERIES):  # Horner in x^2
            poly = mul(add(poly, a), x2)
        series = mul(x, add(poly, 1))  # x (1 + c1 x^2 + ...): x itself for tiny x
        closed = sub(1, div(2, add(exp(mul(x, 2)), 1)))
        below = _TANH_SERIES_BELOW[x.dtype] ** 2
        return C.where(C.lt(x2, below), series, closed)  # false for inf and nan too

    return opmath(x, f)


def erf(x: Tensor) -> Tensor:
    """erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): 1 - t P(t) e^(-x^2), t = 1 / (1 + p|x|), odd.
    float64 gets the same approximation: float32's accuracy, not float64's."""
    p, coefficients = 0.3275911, (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)

    def f(x: Tensor) -> Tensor:
        s = sign(x)
        t = reciprocal(add(mul(prim.mul(x, s), p), 1))
        poly = _c(t, 0.0)
        for a in coefficients:  # Horner: ((a5 t + a4) t + ...) t
            poly = mul(add(poly, a), t)
        return mul(s, sub(1, mul(poly, exp(neg(square(x))))))

    return opmath(x, f)


# ---- conversion ----------------------------------------------------------------------------------------


def cast(x: Tensor, dtype: Any) -> Tensor:
    return prim.cast(x, dtype)


def to(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """`t.to(dtype)`, `t.to(other)`, `t.to("cuda", dtype)`: devices are ignored (the compiler places data)."""
    targets = [a for a in (*args, kwargs.get("dtype")) if a is not None and not _is_device(a)]
    if not targets:
        return x
    target = targets[0]
    return prim.cast(x, target.dtype if isinstance(target, Tensor) else target)


def _is_device(a: Any) -> _bool:
    if type(a).__name__ == "device":
        return True
    return isinstance(a, str) and a.split(":")[0] in ("cpu", "cuda", "mps", "meta")


def type_as(x: Tensor, other: Tensor) -> Tensor:
    return prim.cast(x, other.dtype)


def float(x: Tensor) -> Tensor:  # noqa: A001 - torch method named like a builtin (module code uses _float)
    return prim.cast(x, dt.float32)


def double(x: Tensor) -> Tensor:
    return prim.cast(x, dt.float64)


def half(x: Tensor) -> Tensor:
    return prim.cast(x, dt.float16)


def bfloat16(x: Tensor) -> Tensor:
    return prim.cast(x, dt.bfloat16)


def long(x: Tensor) -> Tensor:
    return prim.cast(x, dt.int64)


def int(x: Tensor) -> Tensor:  # noqa: A001 - torch method named like a builtin (module code uses _int)
    return prim.cast(x, dt.int32)


def short(x: Tensor) -> Tensor:
    return prim.cast(x, dt.int16)


def char(x: Tensor) -> Tensor:
    return prim.cast(x, dt.int8)  # torch's char is signed


def byte(x: Tensor) -> Tensor:
    return prim.cast(x, dt.uint8)


def bool(x: Tensor) -> Tensor:  # noqa: A001 - torch method named like a builtin (module code uses _bool)
    return prim.cast(x, dt.bool_)


def contiguous(x: Tensor) -> Tensor:
    """Views are resolved by the compiler; like a no-op `.contiguous()` on an already laid-out tensor."""
    return x


# ---- operators ----------------------------------------------------------------------------------------

METHODS = (
    "add", "sub", "mul", "div", "true_divide", "neg", "square", "reciprocal", "addcmul", "addcdiv", "lerp",
    "sign", "abs", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
    "sin", "cos", "tan", "tanh", "erf",
    "cast", "to", "type_as", "float", "double", "half", "bfloat16", "long", "int", "short", "char", "byte",
    "bool", "contiguous",
)  # fmt: skip
_OPERATORS = {
    "add": add,
    "sub": sub,
    "mul": mul,
    "truediv": div,
}
_add, _sub, _mul, _truediv = (C.binary_operator(f) for f in _OPERATORS.values())
_radd, _rsub, _rmul, _rtruediv = (C.binary_operator(f, reflected=True) for f in _OPERATORS.values())
DUNDERS = {f"__{n}__": f"_{n}" for n in _OPERATORS} | {f"__r{n}__": f"_r{n}" for n in _OPERATORS}  # __radd__: 2 + t
DUNDERS |= {"__neg__": "neg", "__abs__": "abs"}

__all__ = list(METHODS)
