"""Powers, rounding, and division with rounding: the integer-exact parts of element-wise math.

Integer results stay exact (wrapping like C on overflow): integer division corrects a float estimate of the
quotient with exact integer residuals; float rounding and division follow torch's CPU algorithms.
"""

from __future__ import annotations

import math
from builtins import float as _float
from builtins import int as _int
from typing import Any, Callable

from luminal import dtypes as dt
from luminal.hl import comparison as C
from luminal.hl import elementwise as E
from luminal.hl import prim
from luminal.hl.prim import operands
from luminal.tensor import Tensor

# ---- powers ----------------------------------------------------------------------------------------


def pow(x: Any, exponent: Any) -> Tensor:  # noqa: A001 - torch's name
    """x ** exponent for tensor/scalar combinations, with C's pow special cases. Integer powers are exact
    (negative bases included); integer tensors to negative scalar powers raise, as in torch."""
    if isinstance(x, Tensor) and not isinstance(exponent, Tensor):
        return _pow_scalar_exponent(x, exponent)
    if isinstance(exponent, Tensor) and not isinstance(x, Tensor) and x > 0 and exponent.dtype.is_float:
        log2_base = math.log2(x)  # b^e = 2^(e E.log2 b), E.log2 b taken in double precision
        return E.opmath(exponent, lambda e: prim.exp2(E.mul(e, log2_base)) if x != 1 else E._c(e, 1.0))
    b, e = operands(x, exponent, "pow")
    E._no_bool(b, "pow")
    return _int_pow_tensor(b, e) if b.dtype.is_int else E.opmath2(b, e, "pow", _float_pow)


def _pow_scalar_exponent(x: Tensor, exponent: Any) -> Tensor:
    d = dt.promote_scalar(x.dtype, exponent)
    if d == dt.bool_:
        raise dt.DTypeError("pow is not defined on bool tensors (torch raises too)")
    if d.is_int:
        if exponent < 0:
            raise dt.DTypeError(f"pow: integers to negative integer powers are not allowed (got {exponent})")
        return _int_power(prim.cast(x, d), _int(exponent))
    if _float(exponent).is_integer() and math.fabs(exponent) <= 64:  # square-and-multiply: exact signs
        n = _int(exponent)
        return E.opmath(x, lambda x: _int_power(x, n) if n >= 0 else prim.recip(_int_power(x, -n)))
    if exponent in (0.5, -0.5):  # as torch: E.sqrt and E.rsqrt
        return E.sqrt(prim.cast(x, d)) if exponent > 0 else E.rsqrt(prim.cast(x, d))
    if math.isfinite(exponent) and not _float(exponent).is_integer():  # a negative base: nan via E.log2, as C
        return E.opmath(x, lambda x: prim.exp2(E.mul(prim.log2(x), exponent)))
    return pow(x, prim.full_like(prim.cast(x, d), exponent))  # large integers, +-inf, nan: the general rules


def _int_power(x: Tensor, n: _int) -> Tensor:
    """x ** n for a Python int n >= 0 by square-and-multiply."""
    out, square_ = None, x
    while n:
        if n & 1:
            out = square_ if out is None else prim.mul(out, square_)
        n >>= 1
        if n:
            square_ = prim.mul(square_, square_)
    return E._c(x, 1) if out is None else out


def _float_pow(b: Tensor, e: Tensor) -> Tensor:
    """C's pow: |b|^e = 2^(e E.log2|b|), negated for a negative base and odd integer e, nan for a negative
    base and a finite non-integer e, 1 when e = 0 or b = 1 (even nan) or b = -1 and e = +-inf."""
    mag = prim.exp2(prim.mul(e, prim.log2(E.abs(b))))
    negative = C.lt(b, 0)
    integral = C.eq(fmod(e, 1.0), 0)  # false for inf and nan
    odd = C.logical_and(integral, C.ne(fmod(e, 2.0), 0))
    signed = prim.mul(mag, E.sub(1, E.mul(E._mask(C.logical_and(negative, odd), b), 2)))  # * (1 - 2 [b < 0, e odd])
    one = C.logical_or(C.logical_or(C.eq(e, 0), C.eq(b, 1)), C.logical_and(C.eq(b, -1), C.isinf(e)))
    undefined = C.logical_and(C.logical_and(negative, C.isfinite(e)), C.logical_not(integral))
    return C.where(one, 1.0, C.where(undefined, math.nan, signed))


def _int_pow_tensor(b: Tensor, e: Tensor) -> Tensor:
    """Exact integer b ** e: square-and-multiply over e's 6 low bits (63 is past every non-overflowing power
    of |b| >= 2; larger e keep their parity for b = -1). Negative e: 1 for b = 1, +-1 for b = -1, else 0."""
    ep = C.minimum(C.maximum(e, 0), E.add(fmod(e, 2), 62))
    out, square_ = E._c(b, 1), b
    for k in range(6):
        bit = E._mask(C.ge(fmod(ep, 2 ** (k + 1)), 2**k), b)
        out = prim.mul(out, E.add(prim.mul(bit, E.sub(square_, 1)), 1))  # * (bit ? b^(2^k) : 1)
        square_ = prim.mul(square_, square_)
    odd = E._mask(C.ne(fmod(e, 2), 0), b)
    negative_power = E.add(E._mask(C.eq(b, 1), b), E.mul(E._mask(C.eq(b, -1), b), E.sub(1, E.mul(odd, 2))))
    is_neg = E._mask(C.lt(e, 0), b)
    return E.add(E.mul(out, E.sub(1, is_neg)), E.mul(negative_power, is_neg))  # integers: no inf, so blending is exact


# ---- rounding --------------------------------------------------------------------------------------


def _rounding(x: Tensor, op: str, fn: Callable[[Tensor], Tensor]) -> Tensor:
    E._no_bool(x, op)
    return x if x.dtype.is_int else E.opmath(x, fn)  # integers are already rounded


def _trunc(x: Tensor) -> Tensor:
    # x - fmod(x, 1); the clamp keeps fmod away from +-inf (where it is nan): beyond 2^23 floats are integers
    return E.sub(x, fmod(C.clamp(x, -E.F32_EXACT, E.F32_EXACT), 1.0))


def _floor(x: Tensor) -> Tensor:
    t = _trunc(x)
    return E.sub(t, E._mask(C.lt(x, t), x))  # floor = trunc - [x < trunc]


def trunc(x: Tensor) -> Tensor:
    return _rounding(x, "trunc", _trunc)


def floor(x: Tensor) -> Tensor:
    return _rounding(x, "floor", _floor)


def ceil(x: Tensor) -> Tensor:
    return _rounding(x, "ceil", lambda x: E.neg(_floor(E.neg(x))))  # ceil x = -floor(-x)


def _round_half_even(x: Tensor) -> Tensor:
    f = _floor(x)
    d = E.sub(x, f)  # in [0, 1), exact
    odd = C.ne(fmod(f, 2.0), 0)
    up = C.logical_or(C.lt(0.5, d), C.logical_and(C.eq(d, 0.5), odd))
    return E.add(f, E._mask(up, f))


def round(x: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001 - torch's name
    """Round half to even (as torch); decimals scales by 10^decimals first."""
    if decimals == 0:
        return _rounding(x, "round", _round_half_even)
    E._float_only(x, "round with decimals")
    if decimals > 0:  # as torch: scale up, round, scale back (dividing by 10^d, an exact integer)
        return E.opmath(x, lambda x: E.div(_round_half_even(E.mul(x, 10.0**decimals)), 10.0**decimals))
    return E.opmath(x, lambda x: E.mul(_round_half_even(E.div(x, 10.0**-decimals)), 10.0**-decimals))


def frac(x: Tensor) -> Tensor:
    E._float_only(x, "frac")
    return E.opmath(x, lambda x: E.sub(x, _trunc(x)))  # frac x = x - trunc x


# ---- division with rounding, remainders -----------------------------------------------------------------


def fmod(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "fmod")
    E._no_bool(a, "fmod")
    return prim.fmod(a, b)  # truncated remainder, sign of a (C fmod / %)


def _opposite_signs(r: Tensor, b: Tensor) -> Tensor:
    zero = E._c(r, 0)
    lt = prim.less_than
    return C.logical_or(C.logical_and(lt(r, zero), lt(zero, b)), C.logical_and(lt(zero, r), lt(b, zero)))


def _nearest_int(q: Tensor, dtype: dt.DType) -> Tensor:
    half = E.sub(0.5, E._mask(C.lt(q, 0), q))  # +-0.5 toward q's sign, then truncate
    return prim.cast(E.add(q, half), dtype)


def _exact_quotient(m: Tensor, b: Tensor) -> Tensor:
    """m / b for integers where b divides m: a float32 estimate (24 bits), corrected with exact integer
    residuals; each pass gains 22 bits, so 32-bit types need 2 and 64-bit ones 3. Signed types only (a
    residual may be negative): unsigned ones divide in a signed type (_unsigned_quotient)."""
    inv = prim.recip(prim.cast(b, dt.float32))
    estimate = lambda v: _nearest_int(prim.mul(prim.cast(v, dt.float32), inv), m.dtype)  # noqa: E731
    q = estimate(m)
    for _ in range(1 if m.dtype.bits <= 32 else 2):
        q = prim.add(q, estimate(E.sub(m, prim.mul(q, b))))  # q + (m - q b) / b
    return q


def _unsigned_quotient(a: Tensor, b: Tensor) -> Tensor:
    """a / b truncated (= floored) for unsigned integers, computed in a signed type holding both (uint64, which
    no signed type holds, in halves: _uint64_quotient)."""
    if a.dtype == dt.uint64:
        return _uint64_quotient(a, b)
    wide = dt.int32 if a.dtype.bits <= 16 else dt.int64
    return prim.cast(trunc_divide(prim.cast(a, wide), prim.cast(b, wide)), a.dtype)


def _int64_quotient(a: Tensor, b: Tensor) -> Tensor:
    """a / b for uint64 values below 2^63, divided in int64."""
    return prim.cast(trunc_divide(prim.cast(a, dt.int64), prim.cast(b, dt.int64)), dt.uint64)


def _uint64_quotient(a: Tensor, b: Tensor) -> Tensor:
    """a / b for uint64 over its whole range (numpy's; torch has no uint64 division), from int64 divisions of
    values below 2^63. With a = hi 2^63 + low (hi a's top bit) and 2^63 - 1 = Q b + R for a b below 2^63:
    a / b = low / b + hi (Q + [low % b + R + 1 >= b]), where the bracket is the carry of the two remainders
    (their sum stays below 2^64). A b at or above 2^63 goes into any a at most once: the quotient is a >= b."""
    top = E._c(a, 2**63)
    hi = E._mask(C.logical_not(C.lt(a, top)), a)
    low = E.sub(a, prim.mul(hi, top))
    small_b = C.lt(b, top)
    divisor = C.where(small_b, b, E._c(b, 1))  # keeps the int64 divisions in range where b is not used
    most = E._c(a, 2**63 - 1)
    rest = prim.fmod(most, divisor)
    carry = C.logical_not(C.lt(prim.add(prim.add(prim.fmod(low, divisor), rest), E._c(a, 1)), divisor))
    extra = prim.add(_int64_quotient(E.sub(most, rest), divisor), E._mask(carry, a))
    below = prim.add(_int64_quotient(low, divisor), prim.mul(hi, extra))
    return C.where(small_b, below, E._mask(C.logical_not(C.lt(a, b)), a))


def trunc_divide(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "div")
    E._no_bool(a, "div with rounding_mode")
    if a.dtype.is_unsigned:
        return _unsigned_quotient(a, b)
    if a.dtype.is_int:
        return _exact_quotient(E.sub(a, prim.fmod(a, b)), b)  # (a - fmod(a, b)) / b
    return E.opmath2(a, b, "div", _float_trunc_divide)


def _float_trunc_divide(a: Tensor, b: Tensor) -> Tensor:
    # the nearest integer to (a - fmod(a, b)) / b: exact although 1 / b is rounded; b = 0 or a = inf: a / b
    q = _round_near_integer(E.div(E.sub(a, prim.fmod(a, b)), b))
    return C.where(C.logical_or(C.eq(b, 0), C.isinf(a)), E.div(a, b), q)


def _round_near_integer(q: Tensor) -> Tensor:
    f = _floor(q)
    return E.add(f, E._mask(C.lt(0.5, E.sub(q, f)), f))  # floor, plus one when q is just below an integer


def floor_divide(a: Any, b: Any) -> Tensor:
    """a / b rounded toward -inf (torch.floor_divide; integers stay integers)."""
    a, b = operands(a, b, "floor_divide")
    E._no_bool(a, "floor_divide")
    if a.dtype.is_unsigned:
        return _unsigned_quotient(a, b)  # no negative quotients: floor is trunc
    if a.dtype.is_int:
        r = prim.fmod(a, b)
        q = _exact_quotient(E.sub(a, r), b)
        return E.sub(q, E._mask(_opposite_signs(r, b), q))  # trunc - 1 where the remainder's sign differs from b's
    return E.opmath2(a, b, "floor_divide", _float_floor_divide)


def _float_floor_divide(a: Tensor, b: Tensor) -> Tensor:
    r = prim.fmod(a, b)
    q = E.sub(E.div(E.sub(a, r), b), E._mask(_opposite_signs(r, b), a))  # as torch's div_floor_floating
    return C.where(C.eq(b, 0), E.div(a, b), _round_near_integer(q))


def remainder(a: Any, b: Any) -> Tensor:
    """a - floor(a / b) b: the remainder takes the sign of b (torch.remainder, Python's %)."""
    a, b = operands(a, b, "remainder")
    E._no_bool(a, "remainder")
    r = prim.fmod(a, b)
    if a.dtype.is_int:
        return prim.add(r, prim.mul(b, E._mask(_opposite_signs(r, b), b)))  # r + b where signs differ
    return C.where(_opposite_signs(r, b), prim.add(r, b), r)  # a select: b may be inf


METHODS = ("pow", "trunc", "floor", "ceil", "round", "frac", "fmod", "floor_divide", "remainder")
_OPERATORS = {"floordiv": floor_divide, "mod": remainder, "pow": pow}
_floordiv, _mod, _pow = (C.binary_operator(f) for f in _OPERATORS.values())
_rfloordiv, _rmod, _rpow = (C.binary_operator(f, reflected=True) for f in _OPERATORS.values())
DUNDERS = {f"__{n}__": f"_{n}" for n in _OPERATORS} | {f"__r{n}__": f"_r{n}" for n in _OPERATORS}  # __rpow__: 2 ** t

__all__ = list(METHODS)
