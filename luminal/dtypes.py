"""Element types and PyTorch's type-promotion rules.

Integers follow torch 2.13: bool < uint8/int8 < int16 < int32 < int64, and uint8 with a signed type gives the
smallest signed type holding both (uint8 + int8 = int16). Floats: float16 and bfloat16 < float32 < float64,
float16 with bfloat16 giving float32. uint16, uint32 and uint64 are torch's "limited" types:
torch.promote_types refuses to mix them with any other integer or bool, and so does `promote` (cast first).
"""

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
    signed: bool = True  # integers only: False for uint8..uint64

    @property
    def is_float(self) -> bool:
        return self.category == 2

    @property
    def is_int(self) -> bool:
        return self.category == 1

    @property
    def is_unsigned(self) -> bool:
        return self.category == 1 and not self.signed

    @property
    def min(self) -> int:
        """The smallest value of an integer type."""
        return -(2 ** (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        """The largest value of an integer type."""
        return 2 ** (self.bits - 1) - 1 if self.signed else 2**self.bits - 1

    def wrap(self, value: int) -> int:
        """An integer brought into this integer type's range modulo 2^bits, as C and torch convert integers."""
        v = value % 2**self.bits
        return v - 2**self.bits if self.signed and v > self.max else v

    @property
    def itemsize(self) -> int:
        return self.bits // 8 if self.bits >= 8 else 1

    def __repr__(self) -> str:
        return f"lm.{self.name}"


bool_ = DType("bool", np.dtype(np.bool_), 0, 8)
int8 = DType("int8", np.dtype(np.int8), 1, 8)
int16 = DType("int16", np.dtype(np.int16), 1, 16)
int32 = DType("int32", np.dtype(np.int32), 1, 32)
int64 = DType("int64", np.dtype(np.int64), 1, 64)
uint8 = DType("uint8", np.dtype(np.uint8), 1, 8, signed=False)
uint16 = DType("uint16", np.dtype(np.uint16), 1, 16, signed=False)
uint32 = DType("uint32", np.dtype(np.uint32), 1, 32, signed=False)
uint64 = DType("uint64", np.dtype(np.uint64), 1, 64, signed=False)
float16 = DType("float16", np.dtype(np.float16), 2, 16)
bfloat16 = DType("bfloat16", np.dtype(ml_dtypes.bfloat16), 2, 16)
float32 = DType("float32", np.dtype(np.float32), 2, 32)
float64 = DType("float64", np.dtype(np.float64), 2, 64)

# ONNX's 4- and 2-bit integers, one value per byte in numpy (ml_dtypes). Storage types: the reference interpreter
# reads, writes and casts them and nothing else (Graph.add refuses any other op on them); compiled targets refuse
# them by name. Casts into them wrap modulo 2^bits, as into every integer type.
int4 = DType("int4", np.dtype(ml_dtypes.int4), 1, 4)
uint4 = DType("uint4", np.dtype(ml_dtypes.uint4), 1, 4, signed=False)
int2 = DType("int2", np.dtype(ml_dtypes.int2), 1, 2)
uint2 = DType("uint2", np.dtype(ml_dtypes.uint2), 1, 2, signed=False)
# ONNX's 8- and 4-bit floats, likewise storage types. A cast into one rounds to nearest even and does not
# saturate (out of range is inf, or nan in a type without inf), as ml_dtypes converts and ONNX's saturate=0 says.
float8_e4m3fn = DType("float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn), 2, 8)
float8_e4m3fnuz = DType("float8_e4m3fnuz", np.dtype(ml_dtypes.float8_e4m3fnuz), 2, 8)
float8_e5m2 = DType("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2), 2, 8)
float8_e5m2fnuz = DType("float8_e5m2fnuz", np.dtype(ml_dtypes.float8_e5m2fnuz), 2, 8)
float4_e2m1fn = DType("float4_e2m1fn", np.dtype(ml_dtypes.float4_e2m1fn), 2, 4)
STORAGE_FLOATS = (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float4_e2m1fn)
STORAGE_ONLY = (int4, uint4, int2, uint2, *STORAGE_FLOATS)

INTEGERS = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
ALL = (bool_, *INTEGERS, float16, bfloat16, float32, float64)  # the types every op computes in
# torch's limited unsigned types: they promote only with themselves and floating types (torch.promote_types)
LIMITED = (uint16, uint32, uint64)
BY_NAME = {d.name: d for d in (*ALL, *STORAGE_ONLY)}
_ALIASES = {"float": float32, "half": float16, "long": int64, "int": int32, "bool_": bool_, "fp32": float32,
            "double": float64, "short": int16, "char": int8, "byte": uint8}  # fmt: skip


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
    for d in BY_NAME.values():
        if d.np == npd:
            return d
    raise DTypeError(f"unsupported dtype {npd}; supported: {', '.join(BY_NAME)}")


def check_computable(d: DType, op: str) -> None:
    """Refuse a storage-only type as an operand of `op` (anything but a cast), naming what to do instead."""
    if d in STORAGE_ONLY:
        wider = "float32" if d.is_float else "int8" if d.signed else "uint8"
        raise DTypeError(
            f"{op}: {d.name} is a storage type (values are read, written and cast, nothing else); "
            f"cast it to {wider} first"
        )


def opmath(d: DType) -> DType:
    """The float type a computation on `d` runs in (torch's opmath type): float64 in float64, everything else
    (half types, integers, bool) in float32."""
    return float64 if d == float64 else float32


def promote(a: DType, b: DType) -> DType:
    """The result type of a binary op on two tensors (torch.promote_types)."""
    if a == b:
        return a
    if a.is_float or b.is_float:
        if {a, b} == {float16, bfloat16}:
            return float32  # neither half type holds the other's values
        if a.category != b.category:
            return a if a.is_float else b
        return a if a.bits >= b.bits else b
    if a in LIMITED or b in LIMITED:
        raise DTypeError(
            f"cannot promote {a.name} with {b.name}: torch supports no promotion for uint16, uint32 and uint64 "
            "except with themselves and floating types; cast one operand first"
        )
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.signed == b.signed:
        return a if a.bits >= b.bits else b
    unsigned, signed = (a, b) if b.signed else (b, a)
    return signed if signed.bits > unsigned.bits else int16  # uint8 with int8: the smallest type holding both


def promote_tensors(a: DType, a_ndim: int, b: DType, b_ndim: int) -> DType:
    """torch's rule for two tensors: a 0-dim tensor decides only when it is of a higher category."""
    if (a_ndim == 0) == (b_ndim == 0):
        return promote(a, b)
    zero, full = (a, b) if a_ndim == 0 else (b, a)
    return promote(zero, full) if zero.category > full.category else full  # torch refuses bool with uint16 here too


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
