"""float64 in C-family code: what differs from float32's spelling, so that doubles compute as doubles.

A float64 value computes in `double` (render.py's COMPUTE), its literals carry no `f` suffix, its math calls
the double functions (log2, not log2f), and its helpers (max, select, the conversion to integers) take doubles:
passed to float32's helpers a double would be rounded to float first (16777217.0 to 16777216).
The conversions to integers follow luminal/ops.py's _float_to_int, as integers.py's float versions do.
"""

from __future__ import annotations

import math

from luminal import dtypes as dt
from luminal.ops import INT32_INTERMEDIATE

# The double versions of the dialects' float math (dialects.py: CDialect.math).
MATH = {"Log2": "log2", "Exp2": "exp2", "Sin": "sin", "Sqrt": "sqrt", "Mod": "fmod", "Trunc": "trunc"}


def literal(value: float) -> str:
    """A double constant (hexadecimal: exact, as repr would be)."""
    v = float(value)
    if math.isnan(v):
        return "((double)NAN)"
    if math.isinf(v):
        return "((double)INFINITY)" if v > 0 else "(-(double)INFINITY)"
    return v.hex() if v >= 0 else f"(-{(-v).hex()})"


def from_double(x: str, dtype: dt.DType) -> str:
    """A double converted to the integer `dtype`: truncated, through torch's intermediate (int32 or int64; uint64
    has its own, exact above 2^63), wrapped."""
    through = "uint64" if dtype == dt.uint64 else "int32" if dtype in INT32_INTERMEDIATE else "int64"
    return f"(({dtype.name}_t)lm_d2{through}({x}))"


def prelude(qualifier: str = "static inline") -> str:
    """The helpers the expressions above call. Out of range or nan, a conversion gives the intermediate's
    minimum, as lm_f2i32 / lm_f2i64 do."""
    return f"""{qualifier} double lm_maxd(double acc, double v) {{ return (v > acc || v != v) ? v : acc; }}
{qualifier} double lm_selectd(int c, double a, double b) {{ return c ? a : b; }}
{qualifier} int32_t lm_d2int32(double x) {{ return x >= -2147483648.0 && x < 2147483648.0 ? (int32_t)x : INT32_MIN; }}
{qualifier} int64_t lm_d2int64(double x) {{
  return x >= -9223372036854775808.0 && x < 9223372036854775808.0 ? (int64_t)x : INT64_MIN;
}}
{qualifier} uint64_t lm_d2uint64(double x) {{
  return x >= 9223372036854775808.0 && x < 18446744073709551616.0 ? (uint64_t)x : (uint64_t)lm_d2int64(x);
}}
"""
