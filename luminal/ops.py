"""The closed set of primitive ops: the only ops a backend implements.

Fifteen compute ops (Luminal's set) plus four structural ones. Every op has one line of meaning, a
shape/dtype rule checked when it is recorded, and a numpy `reference` that defines it. Inputs arrive as
arrays already read through their views, so every element-wise op sees operands of one shape.

Property sets (`UNARY`, `BINARY`, `REDUCE`, `ELEMENTWISE`, `COMMUTATIVE`) are what rewrite rules and checks read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np

from luminal import dtypes as dt
from luminal.dtypes import DType
from luminal.symbolic import Dim, Expr, as_dim, as_expr
from luminal.view import ShapeError, dims_product, format_shape, idx

Shape = tuple[Dim, ...]


def _accum_dtype(d: np.dtype) -> np.dtype:
    # Half-precision sums accumulate in float32, as PyTorch's CPU kernels do.
    return np.dtype(np.float32) if d in (dt.float16.np, dt.bfloat16.np) else d


_STORAGE_FLOATS = tuple(d.np for d in dt.STORAGE_FLOATS)


def _opmath(d: np.dtype) -> np.dtype:
    # Float math runs in float32, rounded once to the result type; float64 runs in float64.
    return d if d == dt.float64.np else np.dtype(np.float32)


@dataclass(frozen=True)
class Op:
    name: ClassVar[str] = ""
    arity: ClassVar[int] = 0
    meaning: ClassVar[str] = ""

    def infer(self, shapes: Sequence[Shape], dtypes: Sequence[DType]) -> tuple[Shape, DType]:
        raise NotImplementedError

    def reference(self, *xs: np.ndarray, env: dict[str, int] | None = None) -> np.ndarray:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """JSON-able parameters (the graph file's `params`)."""
        return {}

    def fail(self, msg: str, shapes: Sequence[Shape] = ()) -> ShapeError:
        shown = ", ".join(format_shape(s) for s in shapes)
        return ShapeError(f"{self.name}: {msg}" + (f" (input shapes {shown})" if shapes else ""))


# ---- element-wise --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unary(Op):
    arity: ClassVar[int] = 1
    fn: ClassVar[Any] = None

    def infer(self, shapes, dtypes):
        if not dtypes[0].is_float:
            raise self.fail(f"needs a floating-point input, got {dtypes[0].name}", shapes)
        return shapes[0], dtypes[0]

    def reference(self, x, env=None):
        with np.errstate(all="ignore"):
            return type(self).fn(x.astype(_opmath(x.dtype))).astype(x.dtype)


@dataclass(frozen=True)
class Log2(Unary):
    name = "Log2"
    meaning = "y = log2(x) (-inf at 0, nan below 0)"
    fn = np.log2


@dataclass(frozen=True)
class Exp2(Unary):
    name = "Exp2"
    meaning = "y = 2 ** x"
    fn = np.exp2


@dataclass(frozen=True)
class Sin(Unary):
    name = "Sin"
    meaning = "y = sin(x), x in radians"
    fn = np.sin


@dataclass(frozen=True)
class Sqrt(Unary):
    name = "Sqrt"
    meaning = "y = sqrt(x) (nan below 0)"
    fn = np.sqrt


@dataclass(frozen=True)
class Recip(Unary):
    name = "Recip"
    meaning = "y = 1 / x (inf at 0)"
    fn = np.reciprocal


@dataclass(frozen=True)
class Binary(Op):
    arity: ClassVar[int] = 2
    out_bool: ClassVar[bool] = False

    def infer(self, shapes, dtypes):
        if tuple(shapes[0]) != tuple(shapes[1]):
            raise self.fail("operands must have the same shape (broadcast with expand first)", shapes)
        if dtypes[0] != dtypes[1]:
            raise self.fail(f"operands must have one dtype, got {dtypes[0].name} and {dtypes[1].name}", shapes)
        return shapes[0], dt.bool_ if self.out_bool else dtypes[0]


def _in_c_order(ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # Written in C order, as the interpreter keeps values, and not copied to the same type again: of broadcast
    # views (a matmul's products) numpy follows their strides, and the two copies took 15 of the 20 seconds of
    # a 2048-wide bf16 layer at 17 tokens.
    return ufunc(a, b, order="C").astype(a.dtype, copy=False)


@dataclass(frozen=True)
class Add(Binary):
    name = "Add"
    meaning = "y = a + b (logical or for bool)"

    def reference(self, a, b, env=None):
        with np.errstate(all="ignore"):  # inf + -inf is nan, as the op defines; no warning
            return np.logical_or(a, b) if a.dtype == np.bool_ else _in_c_order(np.add, a, b)


@dataclass(frozen=True)
class Mul(Binary):
    name = "Mul"
    meaning = "y = a * b (logical and for bool)"

    def reference(self, a, b, env=None):
        with np.errstate(all="ignore"):  # inf * 0 is nan, as the op defines; no warning
            return np.logical_and(a, b) if a.dtype == np.bool_ else _in_c_order(np.multiply, a, b)


@dataclass(frozen=True)
class Mod(Binary):
    name = "Mod"
    meaning = "y = fmod(a, b): remainder truncated toward zero, sign of a (C's % and fmod)"

    def infer(self, shapes, dtypes):
        if dtypes[0] == dt.bool_:
            raise self.fail("is not defined on bool", shapes)
        return super().infer(shapes, dtypes)

    def reference(self, a, b, env=None):
        if a.dtype.kind in "iu":
            with np.errstate(all="ignore"):
                return np.fmod(a, np.where(b == 0, 1, b)).astype(a.dtype)  # int % 0 is undefined: define 0-safe
        with np.errstate(all="ignore"):
            return np.fmod(a.astype(_opmath(a.dtype)), b.astype(_opmath(a.dtype))).astype(a.dtype)


@dataclass(frozen=True)
class LessThan(Binary):
    name = "LessThan"
    meaning = "y = a < b, as bool"
    out_bool = True

    def reference(self, a, b, env=None):
        with np.errstate(all="ignore"):  # comparisons with nan are false, without a warning
            return np.less(a, b)


# ---- reductions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reduce(Op):
    arity: ClassVar[int] = 1
    axis: int = 0

    def infer(self, shapes, dtypes):
        shape = shapes[0]
        if not isinstance(self.axis, int) or not 0 <= self.axis < len(shape):
            raise self.fail(f"axis {self.axis} is out of range", shapes)
        if dtypes[0] == dt.bool_:
            raise self.fail("cannot reduce bool (cast first)", shapes)
        return tuple(shape[: self.axis]) + tuple(shape[self.axis + 1 :]), dtypes[0]

    def params(self):
        return {"axis": self.axis}


@dataclass(frozen=True)
class SumReduce(Reduce):
    name = "SumReduce"
    meaning = "y = sum of x over one axis, which is removed (0 for an empty axis)"

    def reference(self, x, env=None):
        return np.add.reduce(x, axis=self.axis, dtype=_accum_dtype(x.dtype)).astype(x.dtype)


@dataclass(frozen=True)
class MaxReduce(Reduce):
    name = "MaxReduce"
    meaning = "y = max of x over one axis, which is removed (-inf, or the type's minimum, for an empty axis)"

    def reference(self, x, env=None):
        if x.shape[self.axis] == 0:
            low = -np.inf if x.dtype.kind == "f" or x.dtype == dt.bfloat16.np else np.iinfo(x.dtype).min
            shape = x.shape[: self.axis] + x.shape[self.axis + 1 :]
            return np.full(shape, low, dtype=x.dtype)
        return np.max(x, axis=self.axis)


# ---- generation, indexing, conversion ----------------------------------------------------------------


@dataclass(frozen=True)
class Iota(Op):
    name = "Iota"
    meaning = "y[i] = expr(i): an integer from a symbolic expression of the indices _i0.. and the symbols"
    arity: ClassVar[int] = 0
    expr: Expr = field(default_factory=lambda: as_expr(0))
    shape: Shape = ()
    dtype: DType = dt.int32

    def infer(self, shapes, dtypes):
        if not self.dtype.is_int:
            raise self.fail(f"produces integers, not {self.dtype.name}")
        allowed = {f"_i{k}" for k in range(len(self.shape))}
        stray = {s for s in self.expr.symbols() if s.startswith("_") and s not in allowed}
        if stray:
            raise self.fail(f"expression {self.expr} uses {sorted(stray)} beyond shape {format_shape(self.shape)}")
        return tuple(as_dim(d) for d in self.shape), self.dtype

    def reference(self, env=None):
        shape = tuple(int(as_expr(d).evaluate(env or {})) for d in self.shape)
        grid = np.indices(shape, dtype=np.int64) if shape else np.zeros((0,), np.int64)
        values = {f"_i{k}": grid[k] for k in range(len(shape))}
        out = self.expr.evaluate({**(env or {}), **values})
        return np.broadcast_to(np.asarray(out, dtype=np.int64), shape).astype(self.dtype.np)

    def params(self):
        return {
            "expr": self.expr.to_json(),
            "shape": [as_expr(d).to_json() for d in self.shape],
            "dtype": self.dtype.name,
        }


@dataclass(frozen=True)
class Gather(Op):
    name = "Gather"
    meaning = "y[i] = data.flat[indexes[i]]: data read row-major through its view; y has the indexes' shape"
    arity: ClassVar[int] = 2

    def infer(self, shapes, dtypes):
        if not dtypes[1].is_int:
            raise self.fail(f"indexes must be integers, got {dtypes[1].name}", shapes)
        return shapes[1], dtypes[0]

    def reference(self, data, indexes, env=None):
        flat = data.reshape(-1)
        bad = (indexes < 0) | (indexes >= flat.size)
        if bad.any():
            raise IndexError(f"Gather: index {int(indexes[bad].flat[0])} is out of range for {flat.size} elements")
        return flat[indexes]


@dataclass(frozen=True)
class Scatter(Op):
    name = "Scatter"
    meaning = "y = dest with y.flat[indexes[i]] = src[i] (for repeated indexes one of the values lands)"
    arity: ClassVar[int] = 3

    def infer(self, shapes, dtypes):
        if not dtypes[1].is_int:
            raise self.fail(f"indexes must be integers, got {dtypes[1].name}", shapes)
        if tuple(shapes[1]) != tuple(shapes[2]):
            raise self.fail("indexes and src must have the same shape", shapes)
        if dtypes[0] != dtypes[2]:
            raise self.fail(f"dest is {dtypes[0].name} but src is {dtypes[2].name}", shapes)
        return shapes[0], dtypes[0]

    def reference(self, dest, indexes, src, env=None):
        out = np.array(dest, copy=True, order="C")  # a C-order copy: reshape(-1) below must be a view
        flat = out.reshape(-1)
        bad = (indexes < 0) | (indexes >= flat.size)
        if bad.any():
            raise IndexError(f"Scatter: index {int(indexes[bad].flat[0])} is out of range for {flat.size} elements")
        flat[indexes.reshape(-1)] = src.reshape(-1)
        return out


@dataclass(frozen=True)
class Cast(Op):
    name = "Cast"
    meaning = (
        "y = x converted to dtype (to bool is x != 0; integers wrap modulo 2^bits; float to int truncates toward "
        "zero and wraps through int32 or int64 as torch does: -1.0 to uint8 is 255; see _float_to_int)"
    )
    arity: ClassVar[int] = 1
    dtype: DType = dt.float32

    def infer(self, shapes, dtypes):
        return shapes[0], self.dtype

    def reference(self, x, env=None):
        if x.dtype in _STORAGE_FLOATS:
            x = x.astype(np.float32)  # exact: every 8- and 4-bit float is a float32
        if self.dtype == dt.bool_:
            return x != 0
        if self.dtype.is_int and (x.dtype.kind == "f" or x.dtype == dt.bfloat16.np):
            return _float_to_int(x, self.dtype)
        if x.dtype == dt.float64.np and self.dtype in (dt.float16, dt.bfloat16):
            x = x.astype(np.float32)  # through float32, as torch's and the generated code's conversions go
        return x.astype(self.dtype.np)

    def params(self):
        return {"dtype": self.dtype.name}


# Float to integer conversion goes through a signed intermediate, as torch's CPU kernels (C casts on x86) do:
# int32 for int8, int16, uint16 and int32 (uint8 included would agree: its wrap of int64 has the same low byte),
# int64 for uint8, uint32, int64 and uint64. A value outside the intermediate's range, or nan, becomes its
# minimum (x86's "integer indefinite"); torch's results there vary by kernel, so tests stay inside.
INT32_INTERMEDIATE = (dt.int8, dt.int16, dt.uint16, dt.int32)


def _float_to_int(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Truncate toward zero, convert to the intermediate (above), wrap into `dtype`; uint64 converts
    [2^63, 2^64) directly. The generated C does the same (lm_f2i32, lm_f2i64, lm_f2u64)."""
    inter = dt.int32 if dtype in INT32_INTERMEDIATE else dt.int64
    with np.errstate(all="ignore"):
        t = np.trunc(x.astype(np.float64))
        inside = (t >= inter.min) & (t < 2.0 ** (inter.bits - 1))
        wide = np.where(inside, t, inter.min).astype(np.int64).astype(dtype.np)
        if dtype != dt.uint64:
            return wide
        upper = (t >= 2.0**63) & (t < 2.0**64)
        high = (np.where(upper, t, 2.0**63) - 2.0**63).astype(np.int64).astype(np.uint64) + np.uint64(2**63)
        return np.where(upper, high, wide)


# ---- structural ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input(Op):
    name = "Input"
    meaning = "a named tensor supplied at each run"
    label: str = ""
    shape: Shape = ()
    dtype: DType = dt.float32

    def infer(self, shapes, dtypes):
        return tuple(as_dim(d) for d in self.shape), self.dtype

    def params(self):
        return {"label": self.label, "shape": [as_expr(d).to_json() for d in self.shape], "dtype": self.dtype.name}


@dataclass(frozen=True)
class Weight(Input):
    name = "Weight"
    meaning = "a named parameter bound once (g.bind) and stored in the graph file"


@dataclass(frozen=True)
class Constant(Op):
    name = "Constant"
    meaning = "a scalar (shape ()) of the given dtype; views expand it"
    value: float = 0.0
    dtype: DType = dt.float32

    def infer(self, shapes, dtypes):
        return (), self.dtype

    def reference(self, env=None):
        return np.array(self.value).astype(self.dtype.np)

    def params(self):
        v = self.value
        if isinstance(v, float) and not np.isfinite(v):
            v = repr(v)  # JSON has no inf/nan literals
        return {"value": v, "dtype": self.dtype.name}


@dataclass(frozen=True)
class Output(Op):
    name = "Output"
    meaning = "marks its input, read through its view, as the named graph output"
    arity: ClassVar[int] = 1
    label: str = ""

    def infer(self, shapes, dtypes):
        return shapes[0], dtypes[0]

    def reference(self, x, env=None):
        return x

    def params(self):
        return {"label": self.label}


UNARY = (Log2, Exp2, Sin, Sqrt, Recip)
BINARY = (Add, Mul, Mod, LessThan)
REDUCE = (SumReduce, MaxReduce)
OTHER = (Iota, Gather, Scatter, Cast)
PRIMITIVES = UNARY + BINARY + REDUCE + OTHER  # the 15 a backend implements
STRUCTURAL = (Input, Weight, Constant, Output)
ELEMENTWISE = UNARY + BINARY + (Cast,)
COMMUTATIVE = (Add, Mul)
BY_NAME: dict[str, type[Op]] = {c.name: c for c in PRIMITIVES + STRUCTURAL}

assert len(PRIMITIVES) == 15


def numel(shape: Shape) -> Expr:
    return dims_product(shape)


__all__ = [c.__name__ for c in PRIMITIVES + STRUCTURAL] + ["Op", "BY_NAME", "PRIMITIVES", "idx"]
