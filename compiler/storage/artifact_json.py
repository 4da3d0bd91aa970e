"""The kernel IR (compiler/kernels/ir.py) as plain JSON, and back, for the compiled-program artifact.

Values are written as a flat table, not as nested JSON: each row names its children by their (smaller) row
numbers. Fused kernels nest values hundreds deep, which nested JSON could only hold past the parser's depth
cap; a table is read with a loop, can hold no cycle (a child always precedes its parent), and stores a shared
sub-expression once. Rows are keyed by their own JSON text, so values that compare equal but differ in bits
(0.0 and -0.0, 1 and 1.0) stay distinct.

Reading treats the data as hostile: every kind, op, dtype, role and name comes from a closed set or pattern
(names reach the generated C as identifiers), and every defect raises `ArtifactError` naming it.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np

from luminal import ops
from luminal.compiler.cuda.library_gemm import LIBRARIES
from luminal.compiler.kernels import ir
from luminal.dtypes import BY_NAME, DType
from luminal.graph_json import dump_json
from luminal.symbolic import Expr, SymbolicError, expr_from_json


class ArtifactError(ValueError):
    """A compiled-program artifact is malformed, inconsistent, stale or hostile; the message names the defect."""


VALUE_KINDS: dict[str, type] = {
    "load": ir.Load,
    "gather": ir.GatherLoad,
    "const": ir.Const,
    "index": ir.IndexValue,
    "guard": ir.Guard,
    "apply": ir.Apply,
    "reduce": ir.Reduce,
    "contract": ir.Contract,
    "attend": ir.Attend,
}
KERNEL_KINDS: dict[str, type] = {"loop": ir.LoopKernel, "scatter": ir.ScatterKernel}
_KIND_OF = {cls: kind for kind, cls in (VALUE_KINDS | KERNEL_KINDS).items()}
# The closed element-wise op set: the primitives' and the kernel IR's own (None: 3 or more arguments).
APPLY_ARITY = {**{cls.name: getattr(cls, "arity", 1) for cls in ops.ELEMENTWISE}, **ir.IR_OPS}
REDUCE_OPS = {"sum", "max"}
# counters: compiler/cuda/arrivals.py; derived: compiler/kernels/derived_weights.py
BUFFER_ROLES = {"input", "weight", "temp", "output", "packed", "counters", "derived"}
PROGRAM_KEYS = {"values", "buffers", "kernels", "inputs", "weights", "outputs", "symbols"}
MAX_VALUES = 10_000_000  # ~100x the value nodes of a large language model's kernels: bounds decode work
MAX_RANK = 64
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


# ---- encoding ------------------------------------------------------------------------------------------


def _const_json(value: Any) -> Any:
    """bool, int and float keep their Python type in JSON; inf/nan become strings (JSON has no literal)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else ("nan" if math.isnan(value) else repr(value))


class _Encoder:
    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.row_of: dict[bytes, int] = {}  # row JSON -> row number: one row per distinct value
        self.seen: dict[int, int] = {}  # id(value) -> row number: shared subtrees are walked once

    def value(self, v: ir.Value) -> int:
        if id(v) in self.seen:
            return self.seen[id(v)]
        row = {"kind": _KIND_OF[type(v)]}
        for f in dataclasses.fields(v):
            row[f.name] = self.field(getattr(v, f.name))
        key = dump_json(row)
        if key not in self.row_of:
            self.row_of[key] = len(self.rows)
            self.rows.append(row)
        self.seen[id(v)] = self.row_of[key]
        return self.row_of[key]

    def field(self, x: Any) -> Any:
        if isinstance(x, ir.Value):
            return self.value(x)
        if isinstance(x, Expr):
            return x.to_json()
        if isinstance(x, DType):
            return x.name
        if isinstance(x, tuple):
            return [self.field(a) for a in x]
        if isinstance(x, str):
            return x
        return _const_json(x)

    def kernel(self, k: ir.Kernel) -> dict[str, Any]:
        return {"kind": _KIND_OF[type(k)], **{f.name: self.field(getattr(k, f.name)) for f in dataclasses.fields(k)}}


def program_to_json(p: ir.KernelProgram) -> dict[str, Any]:
    enc = _Encoder()
    kernels = [enc.kernel(k) for k in p.kernels]
    return {
        "values": enc.rows,
        "kernels": kernels,
        "buffers": [
            {"name": b.name, "dtype": b.dtype.name, "size": b.size.to_json(), "role": b.role, "label": b.label}
            for b in p.buffers.values()  # a list keeps the dict's order, which buffer slots may not depend on
        ],
        # name -> value maps as [name, value] pairs: JSON objects get sorted keys, and the order is part of the IR
        "inputs": [[name, buf] for name, buf in p.inputs.items()],
        "weights": [[name, buf] for name, buf in p.weights.items()],
        "outputs": [[name, buf, [d.to_json() for d in shape]] for name, (buf, shape) in p.outputs.items()],
        "symbols": [[name, e.to_json()] for name, e in p.symbols.items()],
        # only where some GEMM is a library call: artifacts without one keep their bytes
        **({"library": [[name, lib] for name, lib in p.library.items()]} if p.library else {}),
    }


# ---- decoding ------------------------------------------------------------------------------------------


def _obj(data: Any, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ArtifactError(f"{what} must be a JSON object, got {type(data).__name__}")
    if set(data) != keys:
        missing, extra = sorted(keys - set(data)), sorted(set(data) - keys)
        raise ArtifactError(f"{what} has the wrong keys (missing {missing}, unexpected {extra})")
    return data


def _name(x: Any, what: str) -> str:
    if not isinstance(x, str) or not _IDENT.fullmatch(x):
        raise ArtifactError(f"{what}: {x!r:.60} is not an identifier")
    return x


def _label(x: Any, what: str) -> str:
    if not isinstance(x, str) or len(x) > 1024:
        raise ArtifactError(f"{what}: label must be a string of at most 1024 characters")
    return x


def _expr(data: Any, what: str) -> Expr:
    try:
        e = expr_from_json(data)
    except SymbolicError as err:
        raise ArtifactError(f"{what}: {err}") from None
    for s in e.symbols():
        _name(s, f"{what} symbol")  # symbols render into the C source by name
    return e


def _dtype(x: Any, what: str) -> DType:
    if not isinstance(x, str) or x not in BY_NAME:
        raise ArtifactError(f"{what}: unknown dtype {x!r:.40}; supported: {', '.join(BY_NAME)}")
    return BY_NAME[x]


def _const(x: Any, dtype: DType, what: str) -> float | int | bool:
    if isinstance(x, str) and x in _NON_FINITE and not (dtype.is_int or dtype.name == "bool"):
        return _NON_FINITE[x]
    if isinstance(x, bool) or (type(x) is int and -(2**63) <= x < 2**63) or (type(x) is float and math.isfinite(x)):
        return x
    raise ArtifactError(f"{what}: {x!r:.40} is not a {dtype.name} constant")


def _shape(data: Any, what: str) -> tuple[Expr, ...]:
    if not isinstance(data, list) or len(data) > MAX_RANK:
        raise ArtifactError(f"{what}: a shape is a list of at most {MAX_RANK} dims")
    return tuple(_expr(d, f"{what} dim") for d in data)


class _Decoder:
    def __init__(self, rows: Any, buffers: dict[str, ir.Buffer]):
        if not isinstance(rows, list) or len(rows) > MAX_VALUES:
            raise ArtifactError(f"values must be a list of at most {MAX_VALUES} rows")
        self.buffers = buffers
        self.values: list[ir.Value] = []
        for i, row in enumerate(rows):  # children precede parents: one pass, no recursion, no cycles
            self.values.append(self.row(row, f"value {i}"))

    def ref(self, x: Any, what: str) -> ir.Value:
        if type(x) is not int or not 0 <= x < len(self.values):
            raise ArtifactError(f"{what}: {x!r:.40} does not name an earlier value row")
        return self.values[x]

    def buffer(self, x: Any, what: str) -> str:
        if not isinstance(x, str) or x not in self.buffers:
            raise ArtifactError(f"{what}: {x!r:.60} is not a declared buffer")
        return x

    def row(self, row: Any, what: str) -> ir.Value:
        kind = row.get("kind") if isinstance(row, dict) else None
        if kind not in VALUE_KINDS:
            raise ArtifactError(f"{what}: unknown value kind {kind!r:.40}; known: {', '.join(VALUE_KINDS)}")
        cls = VALUE_KINDS[kind]
        r = _obj(row, {"kind"} | {f.name for f in dataclasses.fields(cls)}, what)
        dtype = _dtype(r["dtype"], what)
        if cls is ir.Load:
            return ir.Load(self.buffer(r["buffer"], what), _expr(r["index"], what), dtype)
        if cls is ir.GatherLoad:
            fields = [_expr(r[k], f"{what} {k}") for k in ("index", "valid", "limit")]
            return ir.GatherLoad(self.buffer(r["buffer"], what), self.ref(r["at"], what), *fields, dtype)
        if cls is ir.Const:
            return ir.Const(_const(r["value"], dtype, what), dtype)
        if cls is ir.IndexValue:
            return ir.IndexValue(_expr(r["expr"], what), dtype)
        if cls is ir.Guard:
            return ir.Guard(_expr(r["valid"], what), self.ref(r["value"], what), dtype)
        if cls is ir.Apply:
            args = r["args"]
            if r["op"] not in APPLY_ARITY:
                raise ArtifactError(f"{what}: unknown op {r['op']!r:.40}; known: {', '.join(APPLY_ARITY)}")
            arity = APPLY_ARITY[r["op"]]
            if not isinstance(args, list) or (len(args) != arity if arity else len(args) < 3):
                raise ArtifactError(f"{what}: {r['op']} takes {arity or '3 or more'} arguments, got {args!r:.60}")
            return ir.Apply(r["op"], tuple(self.ref(a, what) for a in args), dtype)
        if cls is ir.Contract:
            a, b = self.ref(r["a"], what), self.ref(r["b"], what)
            return ir.Contract(_name(r["var"], what), _expr(r["extent"], what), a, b, dtype)
        if cls is ir.Attend:
            return self.attend(r, dtype, what)
        if r["op"] not in REDUCE_OPS:
            raise ArtifactError(f"{what}: unknown reduce op {r['op']!r:.40}; known: {', '.join(sorted(REDUCE_OPS))}")
        return ir.Reduce(r["op"], _name(r["var"], what), _expr(r["extent"], what), self.ref(r["body"], what), dtype)

    def attend(self, r: dict[str, Any], dtype: DType, what: str) -> ir.Attend:
        if type(r["safe"]) is not bool:
            raise ArtifactError(f"{what}: safe must be true or false, got {r['safe']!r:.40}")
        operands = (self.ref(r[k], f"{what} {k}") for k in ("q", "k", "v", "bias"))
        s, e = _name(r["s_var"], what), _name(r["e_var"], what)
        s_extent, e_extent = _expr(r["s_extent"], what), _expr(r["e_extent"], what)
        return ir.Attend(s, s_extent, e, e_extent, *operands, _const(r["scale"], dtype, what), r["safe"], dtype)

    def kernel(self, data: Any, what: str) -> ir.Kernel:
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind not in KERNEL_KINDS:
            raise ArtifactError(f"{what}: unknown kernel kind {kind!r:.40}; known: {', '.join(KERNEL_KINDS)}")
        cls = KERNEL_KINDS[kind]
        k = _obj(data, {"kind"} | {f.name for f in dataclasses.fields(cls)}, what)
        name, out, shape = _name(k["name"], what), self.buffer(k["out"], what), _shape(k["shape"], what)
        if cls is ir.LoopKernel:
            return ir.LoopKernel(name, out, shape, self.ref(k["body"], what))
        return ir.ScatterKernel(
            name,
            out,
            shape,
            self.ref(k["dest"], what),
            _shape(k["src_shape"], what),
            self.ref(k["at"], what),
            self.ref(k["src"], what),
            _expr(k["limit"], what),
        )


def _buffer(data: Any, what: str) -> ir.Buffer:
    b = _obj(data, {"name", "dtype", "size", "role", "label"}, what)
    if b["role"] not in BUFFER_ROLES:
        raise ArtifactError(f"{what}: unknown role {b['role']!r:.40}; known: {', '.join(sorted(BUFFER_ROLES))}")
    name = _name(b["name"], what)
    return ir.Buffer(name, _dtype(b["dtype"], what), _expr(b["size"], what), b["role"], _label(b["label"], what))


def _pairs(data: Any, width: int, what: str) -> list[list[Any]]:
    """[[label, ...], ...] rows of `width` items with distinct labels: a name -> value map in order."""
    if not isinstance(data, list) or any(not isinstance(r, list) or len(r) != width for r in data):
        raise ArtifactError(f"{what} must be a list of {width}-item lists")
    labels = [_label(r[0], what) for r in data]
    if len(set(labels)) != len(labels):
        raise ArtifactError(f"{what} names one entry twice")
    return data


def program_from_json(data: Any) -> ir.KernelProgram:
    d = _obj(data, PROGRAM_KEYS | {"library"} if isinstance(data, dict) and "library" in data else PROGRAM_KEYS,
             "the kernel IR")  # fmt: skip
    if not isinstance(d["buffers"], list):
        raise ArtifactError("the kernel IR: buffers must be a list")
    buffers: dict[str, ir.Buffer] = {}
    for i, raw in enumerate(d["buffers"]):
        b = _buffer(raw, f"buffer {i}")
        if b.name in buffers:
            raise ArtifactError(f"buffer {b.name!r} is declared twice")
        buffers[b.name] = b
    dec = _Decoder(d["values"], buffers)
    if not isinstance(d["kernels"], list):
        raise ArtifactError("the kernel IR: kernels must be a list")
    kernels = [dec.kernel(k, f"kernel {i}") for i, k in enumerate(d["kernels"])]
    return ir.KernelProgram(
        buffers=buffers,
        kernels=kernels,
        inputs={k: dec.buffer(v, f"input {k!r:.60}") for k, v in _pairs(d["inputs"], 2, "inputs")},
        weights={k: dec.buffer(v, f"weight {k!r:.60}") for k, v in _pairs(d["weights"], 2, "weights")},
        outputs={
            k: (dec.buffer(buf, f"output {k!r:.60}"), _shape(shape, f"output {k!r:.60}"))
            for k, buf, shape in _pairs(d["outputs"], 3, "outputs")
        },
        symbols={_name(k, "symbols"): _expr(v, f"symbol {k}") for k, v in _pairs(d["symbols"], 2, "symbols")},
        library=_library(d.get("library", []), {k.name for k in kernels}),
    )


def _library(data: Any, kernels: set[str]) -> dict[str, str]:
    """Which kernels are library calls: known kernels, known libraries (compiler/cuda/library_gemm.py)."""
    out = {}
    for name, lib in _pairs(data, 2, "library"):
        if name not in kernels:
            raise ArtifactError(f"library: {name!r:.60} is not a kernel of the program")
        if lib not in LIBRARIES:
            raise ArtifactError(f"library: kernel {name} names {lib!r:.40}; known: {', '.join(LIBRARIES)}")
        out[name] = lib
    return out
