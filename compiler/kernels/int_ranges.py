"""The interval an integer value of the kernel IR lies in, proven from its expression alone.

The integer GEMM (compiler/cpu/int_gemm.py) multiplies its operands as int16: it applies where each operand is
proven to fit, as a quantized matmul's are (uint8 or int8 values minus a zero point lie in [-255, 255]). The
bounds come from the types of the loads and casts, and from constants; an op that may wrap gives its type's
whole range, so a bound holds whatever the values at run time.
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.kernels import ir

Interval = tuple[int, int]


def _full(dtype: dt.DType) -> Interval | None:
    if dtype == dt.bool_:
        return (0, 1)
    return (dtype.min, dtype.max) if dtype.is_int else None


def _within(found: Interval | None, dtype: dt.DType) -> Interval | None:
    """`found` where the type holds it (nothing wrapped), else the type's range."""
    full = _full(dtype)
    if found is None or full is None or found[0] < full[0] or found[1] > full[1]:
        return full
    return found


def _product(a: Interval, b: Interval) -> Interval:
    corners = [x * y for x in a for y in b]
    return (min(corners), max(corners))


def value_range(v: ir.Value) -> Interval | None:
    """[lo, hi] holding every value `v` takes, or None for a float value."""
    if isinstance(v, ir.Const):
        return _within((int(v.value), int(v.value)), v.dtype) if v.dtype.is_int else _full(v.dtype)
    if isinstance(v, ir.Guard):  # padding reads 0
        inner = value_range(v.value)
        return None if inner is None else (min(inner[0], 0), max(inner[1], 0))
    if not isinstance(v, ir.Apply):
        return _full(v.dtype)  # loads, gathers, indices, reductions: whatever the type holds
    args = [value_range(a) for a in v.args]
    if v.op == "Cast":
        return _within(args[0], v.dtype)  # a float source (None) gives the target's range
    if None in args:
        return _full(v.dtype)
    if v.op == "Add":
        return _within((args[0][0] + args[1][0], args[0][1] + args[1][1]), v.dtype)
    if v.op == "Mul":
        return _within(_product(args[0], args[1]), v.dtype)
    if v.op in ("Max", "Select"):  # one of its arguments (Select: of its options, after the choice)
        chosen = args if v.op == "Max" else args[1:]
        return _within((min(a[0] for a in chosen), max(a[1] for a in chosen)), v.dtype)
    return _full(v.dtype)
