"""A CUDA program's tensor-core GEMMs read their half operands at the source, past the casts that widen them.

Fusion never fuses into a GEMM's operands (the CPU GEMM packs plain loads), so in a bf16 model every GEMM
reads float32 copies that cast kernels write: of whole weight matrices, at every forward pass, so each 2 bytes
of a weight cost 10 of traffic (2 read, 4 written, 4 read back). A GEMM that runs on tensor cores stages its
operands in shared memory as half values anyway (compiler/cuda/half_operands.py), so here its operands read
past a widening cast (a kernel whose body is a cast to float32 of a half load, through guards): the cast is
evaluated at the element, from the 2-byte source. A cast kernel left with no reader and no output is dropped,
with its buffer. This runs on the kernel program before its memory is planned, so the sources' lifetimes
cover the GEMMs that now read them.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_plan import plan
from luminal.compiler.cuda.half_operands import HALVES, producers, tensor_core_type
from luminal.compiler.fusion.fuse import substitute_indices, unflatten
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.settle import settle
from luminal.symbolic import as_expr


def widening_cast(k: ir.LoopKernel) -> bool:
    """Whether `k` only widens a half load to float32 (through guards)."""
    v = k.body
    while isinstance(v, ir.Guard):
        v = v.value
    return (
        isinstance(v, ir.Apply) and v.op == "Cast" and v.dtype == dt.float32 and isinstance(v.args[0], ir.Load)
        and v.args[0].dtype in HALVES
    )  # fmt: skip


def _read_past(v: ir.Value, casts: dict[str, ir.LoopKernel], extents) -> ir.Value:
    """`v` with each load of a widening cast's buffer replaced by the cast at the loaded element."""
    if isinstance(v, ir.Load) and v.buffer in casts:
        cast = casts[v.buffer]
        return settle(substitute_indices(cast.body, unflatten(v.index, cast.shape, extents)))
    if isinstance(v, ir.Guard):
        return replace(v, value=_read_past(v.value, casts, extents))
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(_read_past(a, casts, extents) for a in v.args))
    return v


def _with_contract(v: ir.Value, old: ir.Contract, new: ir.Contract) -> ir.Value:
    """`v` with the GEMM's Contract (every equal copy, where gemm_plan finds them) replaced by `new`."""
    if v == old:
        return new
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(_with_contract(a, old, new) for a in v.args))
    if isinstance(v, ir.Guard):
        return replace(v, value=_with_contract(v.value, old, new))
    if isinstance(v, ir.Reduce):
        return replace(v, body=_with_contract(v.body, old, new))
    return v


def read_past_casts(p: ir.KernelProgram) -> ir.KernelProgram:
    """`p` with its tensor-core GEMMs reading past widening casts, and the casts no one reads left out."""
    written = producers(p)
    casts = {b: k for b, k in written.items() if widening_cast(k)}
    if not casts:
        return p
    kernels = []
    for k in p.kernels:
        gemm = plan(k)
        if gemm is not None and tensor_core_type(p, k, gemm) is not None:
            c = gemm.contract
            extents = {**{f"_i{j}": as_expr(d) for j, d in enumerate(k.shape)}, c.var: c.extent}
            past = replace(c, a=_read_past(c.a, casts, extents), b=_read_past(c.b, casts, extents))
            k = replace(k, body=_with_contract(k.body, c, past))
        kernels.append(k)
    outputs = {buffer for buffer, _ in p.outputs.values()}
    read = set().union(*(ir.buffers_read(k) for k in kernels))
    unread = {b for b in casts if b not in read and b not in outputs}
    kept = [k for k in kernels if k.out not in unread]
    buffers = {name: b for name, b in p.buffers.items() if name not in unread}
    return replace(p, kernels=kept, buffers=buffers)
