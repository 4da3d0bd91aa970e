"""The run plan (compiler/storage/run_plan.py) as plain JSON, and back, for the compiled-program artifact.

Read as the kernel IR is (artifact_json.py): every name must be an identifier (kernel names reach the host
shims' generated drivers), every buffer one the IR declares, every symbol one the program binds, every number
an integer in range; a defect raises `ArtifactError` naming it.
"""

from __future__ import annotations

from typing import Any

from luminal.compiler.kernels import ir
from luminal.compiler.storage.artifact_json import ArtifactError, _dtype, _expr, _name, _obj, _pairs
from luminal.compiler.storage.run_plan import Launch, LibraryGemm, Matrix, RunPlan
from luminal.symbolic import Expr

PLAN_KEYS = {"launches", "at_load", "together", "written_inputs", "packed_only"}
LAUNCH_KEYS = {"kernel", "shape", "grid", "block", "buffers", "call", "writes"}
CALL_KEYS = {"a", "b", "c", "m", "n", "k", "batch"}
MATRIX_KEYS = {"buffer", "dtype", "transpose", "ld", "offset", "batch_stride"}
MAX_BLOCK = 1024  # threads per block on every GPU the targets name
MAX_INT = 2**62  # strides, offsets and extents: far past any real one, still a C int64_t


# ---- encoding ------------------------------------------------------------------------------------------


def _matrix_json(x: Matrix) -> dict[str, Any]:
    return {"buffer": x.buffer, "dtype": x.dtype.name, "transpose": x.transpose, "ld": x.ld, "offset": x.offset,
            "batch_stride": x.batch_stride}  # fmt: skip


def _call_json(call: LibraryGemm | None) -> dict[str, Any] | None:
    if call is None:
        return None
    extents = {"m": call.m.to_json(), "n": call.n.to_json(), "k": call.k, "batch": call.batch.to_json()}
    return {**{s: _matrix_json(getattr(call, s)) for s in "abc"}, **extents}


def _launch_json(launch: Launch) -> dict[str, Any]:
    return {
        "kernel": launch.kernel,
        "shape": launch.shape,
        "grid": launch.grid.to_json(),
        "block": launch.block,
        "buffers": list(launch.buffers),
        "call": _call_json(launch.call),
        "writes": launch.writes,
    }


def plan_to_json(plan: RunPlan) -> dict[str, Any]:
    return {
        "launches": [_launch_json(launch) for launch in plan.launches],
        "at_load": [_launch_json(launch) for launch in plan.at_load],
        "together": [list(names) for names in plan.together],
        "written_inputs": [[buf, name] for buf, name in plan.written_inputs.items()],
        "packed_only": list(plan.packed_only),
    }


# ---- decoding ------------------------------------------------------------------------------------------


def _int(x: Any, what: str, lo: int = 0, hi: int = MAX_INT) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise ArtifactError(f"{what}: {x!r:.40} is not an integer in [{lo}, {hi}]")
    return x


def _list(x: Any, what: str) -> list[Any]:
    if not isinstance(x, list):
        raise ArtifactError(f"{what} must be a list")
    return x


class _Reader:
    def __init__(self, kernels: ir.KernelProgram):
        self.kernels = kernels

    def buffer(self, x: Any, what: str) -> str:
        if not isinstance(x, str) or x not in self.kernels.buffers:
            raise ArtifactError(f"{what}: {x!r:.60} is not a declared buffer")
        return x

    def extent(self, x: Any, what: str) -> Expr:
        e = _expr(x, what)
        unbound = sorted(e.symbols() - set(self.kernels.symbols))
        if unbound:
            raise ArtifactError(f"{what}: symbols {unbound[:4]} are not the program's")
        return e

    def matrix(self, data: Any, what: str) -> Matrix:
        m = _obj(data, MATRIX_KEYS, what)
        if type(m["transpose"]) is not bool:
            raise ArtifactError(f"{what}: transpose must be true or false")
        ld, offset = _int(m["ld"], f"{what} ld"), _int(m["offset"], f"{what} offset")
        stride = _int(m["batch_stride"], f"{what} batch_stride", -MAX_INT)  # a flipped batch axis runs backwards
        return Matrix(self.buffer(m["buffer"], what), _dtype(m["dtype"], what), m["transpose"], ld, offset, stride)

    def call(self, data: Any, what: str) -> LibraryGemm | None:
        if data is None:
            return None
        c = _obj(data, CALL_KEYS, what)
        a, b, out = (self.matrix(c[s], f"{what} {s}") for s in "abc")
        m, n, batch = (self.extent(c[s], f"{what} {s}") for s in ("m", "n", "batch"))
        return LibraryGemm(a, b, out, m, n, _int(c["k"], f"{what} k"), batch)

    def launch(self, data: Any, what: str) -> Launch:
        d = _obj(data, LAUNCH_KEYS, what)
        buffers = tuple(self.buffer(b, what) for b in _list(d["buffers"], f"{what} buffers"))
        return Launch(
            kernel=_name(d["kernel"], what),
            shape=_name(d["shape"], what),
            grid=self.extent(d["grid"], f"{what} grid"),
            block=_int(d["block"], f"{what} block", 0, MAX_BLOCK),
            buffers=buffers,
            call=self.call(d["call"], f"{what} call"),
            writes=_int(d["writes"], f"{what} writes", 0, len(buffers)),
        )

    def launches(self, data: Any, what: str) -> tuple[Launch, ...]:
        return tuple(self.launch(x, f"{what} {i}") for i, x in enumerate(_list(data, what)))


def plan_from_json(data: Any, kernels: ir.KernelProgram) -> RunPlan:
    """The run plan stored beside `kernels` (already read), checked against it."""
    d = _obj(data, PLAN_KEYS, "the run plan")
    read = _Reader(kernels)
    names = {k.name for k in kernels.kernels}
    together = []
    for i, group in enumerate(_list(d["together"], "together")):
        members = tuple(_name(x, f"together {i}") for x in _list(group, f"together {i}"))
        if not set(members) <= names:
            raise ArtifactError(f"together {i}: {sorted(set(members) - names)[:4]} are not kernels of the program")
        together.append(members)
    written = {}
    for buf, name in _pairs(d["written_inputs"], 2, "written_inputs"):
        if not isinstance(name, str) or kernels.inputs.get(name) != buf:
            raise ArtifactError(f"written_inputs: {buf!r:.60} is not the buffer of input {name!r:.60}")
        written[buf] = name
    weights = set(kernels.weights.values())
    packed_only = tuple(_list(d["packed_only"], "packed_only"))
    if not all(isinstance(b, str) for b in packed_only) or not set(packed_only) <= weights:
        raise ArtifactError("packed_only must name weight buffers of the program")
    return RunPlan(
        launches=read.launches(d["launches"], "launch"),
        at_load=read.launches(d["at_load"], "load launch"),
        together=tuple(together),
        written_inputs=written,
        packed_only=packed_only,
    )
