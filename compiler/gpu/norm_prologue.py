"""A norm computed in the prologue of the GEMVs that read it, instead of as its own row kernel.

In a decode step each RMSNorm is a kernel of one block (the row's sum of squares, then the scaled row) whose
output only the next GEMVs read (q, k and v; gate and up; the logits), each staging it once per block into
shared memory (compiler/gpu/gemv.py). A launch costs ~1.3 us even inside a CUDA graph, about what the norm's
GEMVs take to stream a small weight, so the norm is inlined into each of them: every GEMV block then sums the
squares itself (split over the block, folded deterministically) and stages the scaled row.

Where it pays: the separate kernel stores the normalised row as float32 and every GEMV block reads it back (4
bytes an element); inlined, a block reads the norm's inputs instead (the residual sum, stored by its producer's
epilogue as compiler/fusion/fuse_residual.py arranges, and the norm's weight: 4 bytes an element in bf16, the residual
read twice, the second time from L1). So a norm is inlined only when its readers are all GEMVs that stage it
(K within MAX_STAGED_BYTES: the down projection's 8192 included), and when what its row reads per element is at most
MAX_BYTES: a norm that still recomputes a long residual chain, or reads several wide inputs, stays a kernel.
"""

from __future__ import annotations

import itertools

from luminal.compiler.analysis import gemv_plan
from luminal.compiler.fusion.fuse import inline, with_kernels
from luminal.compiler.fusion.limits import within_limits
from luminal.compiler.gpu.launch import row_statistics, staged
from luminal.compiler.kernels import ir

MAX_BYTES = 8  # per element of the row: twice the float32 row that every GEMV block reads back today


def bytes_along(v: ir.Value, variable: str) -> int:
    """The bytes `v` reads per step of `variable`: one element of each distinct buffer it reads along it or
    along a reduction's variable inside it (a token id read once per row does not count)."""
    along = {variable} | {n.var for n in ir.walk(v) if isinstance(n, ir.Reduce)}
    reads = {
        n.buffer: n.dtype.itemsize
        for n in ir.walk(v)
        if isinstance(n, (ir.Load, ir.GatherLoad)) and n.index.symbols() & along
    }
    return sum(reads.values())


def _as_prologue(norm: ir.LoopKernel, reader: ir.LoopKernel, names) -> ir.LoopKernel | None:
    """`reader` (a GEMV staging `norm`'s output as its vector) computing the norm itself, or None."""
    before = gemv_plan.plan(reader)
    if before is None or not staged(reader, before):
        return None
    fused = inline(norm, reader, names)
    after = gemv_plan.plan(fused)
    if after is None or not after.statistics or after.stream != before.stream or not staged(fused, after):
        return None
    return fused if within_limits(fused) else None


def fuse_norms_into_gemvs(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with every norm read only by GEMVs computed in their prologues (see the module docstring)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel] = list(program.kernels)
    names = itertools.count(7000)  # fresh reduction names, above those fusion and fuse_index used
    j = 0
    while j < len(kernels):
        norm = kernels[j]
        j += 1
        if not isinstance(norm, ir.LoopKernel) or norm.out in outputs or not row_statistics(norm):
            continue
        if gemv_plan.plan(norm) is not None or bytes_along(norm.body, f"_i{len(norm.shape) - 1}") > MAX_BYTES:
            continue
        readers = [r for r, k in enumerate(kernels) if norm.out in ir.buffers_read(k)]
        fused = {}
        for r in readers:
            reader = kernels[r]
            fused[r] = _as_prologue(norm, reader, names) if isinstance(reader, ir.LoopKernel) else None
        if not readers or any(k is None for k in fused.values()):
            continue
        kernels = [fused.get(r, k) for r, k in enumerate(kernels)]
        del kernels[j - 1]
        j -= 1
    return with_kernels(program, kernels)
