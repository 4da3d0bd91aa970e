"""GEMVs brought together in the program's order, so that gemv_batch.py can merge them into one launch.

A Llama decode layer's first projections are q, k and v, but lowering may place a small kernel between q and k:
in the first layer, what a layer computes from the positions alone (the rotation's angles, the mask) comes right
after the first GEMV, so the first layer's q launched alone while every other layer's q, k and v were one grid.
Here such a kernel moves ahead of the GEMVs before it when it reads nothing they write and they read nothing it
writes. A kernel that reads the GEMV before it (a decode step's key cache concatenation, after the key
projection) cannot; then the next GEMV (the value projection) moves ahead of it where it is independent of it.
The memory plan (compiler/analysis/memory.py) follows the new order, as it follows any order.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.compiler.gpu.launch import loop_shape
from luminal.compiler.kernels import ir


def _is_gemv(k: ir.Kernel) -> bool:
    return isinstance(k, ir.LoopKernel) and loop_shape(k) == "gemv"


def _independent(k: ir.Kernel, earlier: ir.Kernel) -> bool:
    """Whether `k` may run before `earlier`: neither reads nor writes what the other writes."""
    return earlier.out not in ir.buffers_read(k) and k.out not in ir.buffers_read(earlier) and k.out != earlier.out


def bring_gemvs_together(p: ir.KernelProgram) -> ir.KernelProgram:
    """`p` with each run of other kernels that separates two GEMVs moved, in its order, ahead of the GEMVs just
    before it where every kernel of the run is independent of them all; else the GEMVs after the run move ahead
    of it, one by one, while each is independent of all of it; else the run passes what it can."""
    order = list(p.kernels)
    moved = False
    j = 1
    while j < len(order):
        end = j
        while end < len(order) and not _is_gemv(order[end]):
            end += 1
        if end == j or end == len(order) or not _is_gemv(order[j - 1]):
            j = end + 1
            continue
        run, after = order[j:end], order[end]
        start = j
        while start > 0 and _is_gemv(order[start - 1]) and all(_independent(k, order[start - 1]) for k in run):
            start -= 1
        passes_all = start == 0 or not _is_gemv(order[start - 1])
        if not passes_all and all(_independent(after, k) for k in run):
            order[j : end + 1] = [after, *run]
            moved = True
            j += 1  # the run again, now after that GEMV: the next GEMV may pass it too
            continue
        if start < j:
            order[start:end] = [*run, *order[start:j]]
            moved = True
        j = end + 1
    return replace(p, kernels=order) if moved else p
