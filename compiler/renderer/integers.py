"""Integer semantics in C-family code, for every integer dtype: literals, wrapping arithmetic, maxima, and the
conversion from float, spelled so that C and CUDA compute what the reference interpreter does.

C promotes int8, uint8, int16 and uint16 operands to int before it adds or multiplies them, so a result is cast
back to its type after each op (uint8 255 + 1 is 0, as in torch). uint16 products widen to uint32 first: two
uint16 values promoted to int can overflow it. Unsigned comparison and % need nothing: operands of one type
compare and divide as that type (uint32 and uint64 natively, narrower ones exactly as int).
"""

from __future__ import annotations

from luminal import dtypes as dt

CTYPE = {d: f"{d.name}_t" for d in dt.INTEGERS}  # int8 -> int8_t ... uint64 -> uint64_t


def literal(value: int, dtype: dt.DType) -> str:
    """An integer constant of `dtype` (wrapped into its range) as a C expression of that type."""
    v = dtype.wrap(int(value))
    if dtype == dt.int64 and v == dtype.min:
        return "((int64_t)(-9223372036854775807LL - 1))"  # 9223372036854775808LL alone is out of range
    suffix = "ULL" if dtype == dt.uint64 else "LL" if dtype.bits == 64 else ""
    text = f"{v}{suffix}" if v >= 0 else f"({v}{suffix})"
    if dtype == dt.int32 and v == dtype.min:
        text = "(-2147483647 - 1)"
    return f"(({CTYPE[dtype]}){text})"


def wrapping(op: str, a: str, b: str, dtype: dt.DType) -> str:
    """a (+ or *) b in `dtype`, wrapping modulo 2^bits (int32 and int64 wrap by -fwrapv on the CPU)."""
    if dtype.bits >= 32:
        return f"({a} {op} {b})"
    if dtype == dt.uint16 and op == "*":
        return f"((uint16_t)((uint32_t)({a}) * (uint32_t)({b})))"
    return f"(({CTYPE[dtype]})({a} {op} {b}))"


def remainder(a: str, b: str, dtype: dt.DType) -> str:
    """C's truncated a % b; % 0 is defined as 0 (the reference's choice), and a signed % -1 as 0 (INT_MIN % -1
    traps). An unsigned b never equals -1: comparing it with -1 would convert -1 to the type's maximum."""
    t = CTYPE[dtype]
    zero = f"({b}) == 0" if dtype.is_unsigned else f"({b}) == 0 || ({b}) == -1"
    return f"({zero} ? ({t})0 : ({t})(({a}) % ({b})))"


def maximum(a: str, b: str, dtype: dt.DType) -> str:
    """max(a, b) through a helper (see render.py for why not a ternary): int64 holds every type's values but
    uint64's upper half, which has its own."""
    helper = "lm_maxu" if dtype == dt.uint64 else "lm_maxi"
    return f"(({CTYPE[dtype]}){helper}({a}, {b}))"


# torch's float -> integer conversion goes through int32 for these types and through int64 for the others
# (luminal/ops.py: _float_to_int, the reference this matches).
_THROUGH_INT32 = {d.name for d in (dt.int8, dt.int16, dt.uint16, dt.int32)}


def from_float(x: str, dtype: dt.DType) -> str:
    """A float compute value converted to `dtype`: truncated, through the intermediate, wrapped."""
    helper = "lm_f2u64" if dtype == dt.uint64 else "lm_f2i32" if dtype.name in _THROUGH_INT32 else "lm_f2i64"
    return f"(({CTYPE[dtype]}){helper}({x}))"


def prelude(qualifier: str = "static inline") -> str:
    """The helpers the expressions above call, for C (`static inline`) or CUDA (`static __device__ inline`).
    Out of range or nan, a conversion gives the intermediate's minimum (x86's result; C leaves it undefined)."""
    return f"""{qualifier} int64_t lm_selecti(int c, int64_t a, int64_t b) {{ return c ? a : b; }}
{qualifier} int64_t lm_maxi(int64_t a, int64_t b) {{ return a > b ? a : b; }}
{qualifier} uint64_t lm_maxu(uint64_t a, uint64_t b) {{ return a > b ? a : b; }}
{qualifier} int32_t lm_f2i32(float x) {{ return x >= -2147483648.0f && x < 2147483648.0f ? (int32_t)x : INT32_MIN; }}
{qualifier} int64_t lm_f2i64(float x) {{
  return x >= -9223372036854775808.0f && x < 9223372036854775808.0f ? (int64_t)x : INT64_MIN;
}}
{qualifier} uint64_t lm_f2u64(float x) {{
  return x >= 9223372036854775808.0f && x < 18446744073709551616.0f ? (uint64_t)x : (uint64_t)lm_f2i64(x);
}}
"""
