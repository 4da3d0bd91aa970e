"""Element-wise ops: arithmetic, math functions, activations, comparisons, logic, dtype conversion.

Each is a composition of primitives, written once, with its identity as a comment.
"""

from __future__ import annotations

import math
from typing import Any

from luminal import dtypes as dt
from luminal.hl import prim
from luminal.hl.prim import operands
from luminal.tensor import Tensor

LOG2_E = 1 / math.log(2)  # exp(x) = 2 ** (x * log2(e))
LN_2 = math.log(2)  # ln(x) = log2(x) * ln(2)


# ---- arithmetic ----------------------------------------------------------------------------------------


def add(a: Any, b: Any) -> Tensor:
    return prim.add(*operands(a, b, "add"))


def mul(a: Any, b: Any) -> Tensor:
    return prim.mul(*operands(a, b, "mul"))


def neg(x: Tensor) -> Tensor:
    return prim.mul(x, prim.full_like(x, -1))  # -x = x * -1


def sub(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "sub")
    return prim.add(a, neg(b))  # a - b = a + (-1 * b)


def reciprocal(x: Tensor) -> Tensor:
    return prim.recip(prim.float_operand(x))


def div(a: Any, b: Any) -> Tensor:
    a, b = operands(a, b, "div")
    a, b = prim.float_operand(a), prim.float_operand(b)  # true division always gives floats
    return prim.mul(a, prim.recip(b))  # a / b = a * (1 / b)


def exp2(x: Tensor) -> Tensor:
    return prim.exp2(prim.float_operand(x))


def log2(x: Tensor) -> Tensor:
    return prim.log2(prim.float_operand(x))


def exp(x: Tensor) -> Tensor:
    x = prim.float_operand(x)
    return prim.exp2(mul(x, LOG2_E))  # e^x = 2^(x log2 e)


def log(x: Tensor) -> Tensor:
    return mul(log2(x), LN_2)  # ln x = log2(x) ln 2


def sqrt(x: Tensor) -> Tensor:
    return prim.sqrt(prim.float_operand(x))


def sin(x: Tensor) -> Tensor:
    return prim.sin(prim.float_operand(x))


# ---- conversion ----------------------------------------------------------------------------------------


def cast(x: Tensor, dtype: Any) -> Tensor:
    return prim.cast(x, dtype)


def to(x: Tensor, dtype: Any) -> Tensor:
    """`t.to(dtype)`; devices do not exist at graph level (the compiler chooses them)."""
    return prim.cast(x, dtype)


def float(x: Tensor) -> Tensor:  # noqa: A001 - torch's method name
    return prim.cast(x, dt.float32)


def half(x: Tensor) -> Tensor:
    return prim.cast(x, dt.float16)


def long(x: Tensor) -> Tensor:
    return prim.cast(x, dt.int64)


def int(x: Tensor) -> Tensor:  # noqa: A001 - torch's method name
    return prim.cast(x, dt.int32)


def bool(x: Tensor) -> Tensor:  # noqa: A001 - torch's method name
    return prim.cast(x, dt.bool_)


def contiguous(x: Tensor) -> Tensor:
    """Views are resolved by the compiler; like a no-op `.contiguous()` on an already laid-out tensor."""
    return x


METHODS = (
    "add",
    "mul",
    "neg",
    "sub",
    "reciprocal",
    "div",
    "exp2",
    "log2",
    "exp",
    "log",
    "sqrt",
    "sin",
    "cast",
    "to",
    "float",
    "half",
    "long",
    "int",
    "bool",
    "contiguous",
)
DUNDERS = {
    "__add__": "add",
    "__radd__": "add",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__sub__": "sub",
    "__rsub__": "_rsub",
    "__truediv__": "div",
    "__rtruediv__": "_rdiv",
    "__neg__": "neg",
}


def _rsub(b: Tensor, a: Any) -> Tensor:
    return sub(a, b)


def _rdiv(b: Tensor, a: Any) -> Tensor:
    return div(a, b)


__all__ = list(METHODS)
