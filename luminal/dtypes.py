"""Element types and PyTorch's type-promotion rules."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    np: np.dtype
    category: int  # 0 bool, 1 integer, 2 floating: promotion never goes down a category
    bits: int

    @property
    def is_float(self) -> bool:
        return self.category == 2

    @property
    def is_int(self) -> bool:
        return self.category == 1

    @property
    def itemsize(self) -> int:
        return self.bits // 8 if self.bits >= 8 else 1

    def __repr__(self) -> str:
        return f"lm.{self.name}"


bool_ = DType("bool", np.dtype(np.bool_), 0, 8)
int32 = DType("int32", np.dtype(np.int32), 1, 32)
int64 = DType("int64", np.dtype(np.int64), 1, 64)
float16 = DType("float16", np.dtype(np.float16), 2, 16)
bfloat16 = DType("bfloat16", np.dtype(ml_dtypes.bfloat16), 2, 16)
float32 = DType("float32", np.dtype(np.float32), 2, 32)

ALL = (bool_, int32, int64, float16, bfloat16, float32)
BY_NAME = {d.name: d for d in ALL}
_ALIASES = {"float": float32, "half": float16, "long": int64, "int": int32, "bool_": bool_, "fp32": float32}


class DTypeError(TypeError):
    """An element type is not supported, or does not fit an operation."""


def dtype_of(x) -> DType:
    """Resolve a luminal dtype, its name, a numpy dtype, or a torch dtype to a DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        name = x.removeprefix("torch.")
        if name in BY_NAME:
            return BY_NAME[name]
        if name in _ALIASES:
            return _ALIASES[name]
        raise DTypeError(f"unsupported dtype {x!r}; supported: {', '.join(BY_NAME)}")
    if x is bool:
        return bool_
    if x is int:
        return int64
    if x is float:
        return float32
    if type(x).__module__ == "torch":
        return dtype_of(str(x))
    try:
        npd = np.dtype(x)
    except TypeError:
        raise DTypeError(f"unsupported dtype {x!r}") from None
    for d in ALL:
        if d.np == npd:
            return d
    raise DTypeError(f"unsupported dtype {npd}; supported: {', '.join(BY_NAME)}")


def promote(a: DType, b: DType) -> DType:
    """The result type of a binary op on two tensors (torch.promote_types)."""
    if a == b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if {a, b} == {float16, bfloat16}:
        return float32  # neither half type holds the other's values
    return a if a.bits >= b.bits else b


def promote_tensors(a: DType, a_ndim: int, b: DType, b_ndim: int) -> DType:
    """torch's rule for two tensors: a 0-dim tensor decides only when it is of a higher category."""
    if (a_ndim == 0) == (b_ndim == 0):
        return promote(a, b)
    zero, full = (a, b) if a_ndim == 0 else (b, a)
    return zero if zero.category > full.category else full


def promote_scalar(t: DType, scalar: object) -> DType:
    """The result type of tensor (op) Python scalar: a scalar only lifts the category (torch.result_type)."""
    if isinstance(scalar, bool):
        kind = 0
    elif isinstance(scalar, (int, np.integer)):
        kind = 1
    elif isinstance(scalar, (float, np.floating)):
        kind = 2
    else:
        raise DTypeError(f"cannot combine a tensor with {type(scalar).__name__} {scalar!r}")
    if kind <= t.category:
        return t
    return int64 if kind == 1 else float32
