"""Carrying out the fusion the search chose: each `Inline` node's producer computed in its readers' loops.

Lowering gives an Inline node a kernel that only reads its producer through a view (no arithmetic), and its
buffer is *marked*. From the last kernel to the first, each marked kernel M over a producer kernel P becomes,
in each kernel R that reads it, P's body substituted into R's loads (fuse.inline, through M's view). Kernels
nothing reads any more are dropped as they are reached, so P disappears once every reader computes it.

The fusion rules say only which kinds of producer a reader may compute (search/rules_fusion.py); here each
fused kernel must also be one the kernel IR generates well, as for the unsearched policy (fuse.py):
- a GEMM or a reduction is computed in its reader only when that reader is its only one: extraction, choosing
  per e-class, cannot count readers, and each reader would repeat the whole reduction (element-wise work is
  cheap to repeat, and is, in every reader that chose it);
- at most one GEMM per kernel, never as another GEMM's operand, and still a GEMM plan (an epilogue: a GEMM
  summed inside another reduction would run as plain loops);
- a reduction is read once per element, or where the C generator hoists it (compiler/kernels/hoist.py);
- bounded C text, and a roofline estimate (compiler/analysis/cost.py) no worse than the two kernels it replaces.
A reader that fails these reads P's buffer through M's view instead, as if the extraction had not fused it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from luminal.compiler.analysis import gemm_plan
from luminal.compiler.analysis.cost import KernelCosts
from luminal.compiler.fusion import fuse, limits
from luminal.compiler.kernels import ir


def fuse_chosen(
    program: ir.KernelProgram, marked: set[str], target, env: dict[str, int] | None = None, stats: dict | None = None
) -> ir.KernelProgram:
    """`program` with each marked kernel's producer fused into its readers; `stats` (when given) counts the
    reads fused and those declined (read from the producer's buffer)."""
    stats = {} if stats is None else stats
    stats.update(fused=0, declined=0)
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel | None] = list(program.kernels)
    index = {kernel.out: k for k, kernel in enumerate(kernels)}
    readers = {name: set(ks) for name, ks in fuse.readers_of(program).items()}
    names = itertools.count(1000)
    cost_of = KernelCosts(program.buffers, target, env)  # a clone and its readers are estimated more than once

    def replace_kernel(k: int, new: ir.Kernel | None) -> None:
        """Kernel k becomes `new` (None: dropped), and the reader table follows."""
        for name in ir.buffers_read(kernels[k]):
            readers[name].discard(k)
        kernels[k] = new
        for name in ir.buffers_read(new) if new is not None else ():
            readers.setdefault(name, set()).add(k)

    for k in reversed(range(len(kernels))):
        kernel = kernels[k]
        if kernel.out not in outputs and not readers.get(kernel.out):
            replace_kernel(k, None)  # every reader computes it now
            continue
        if kernel.out not in marked or kernel.out in outputs:
            continue
        source = next(iter(ir.buffers_read(kernel)), None)
        producer = kernels[index[source]] if source in index else None
        # A producer stored anyway (an output, or read by a kernel that did not choose to inline it) is read
        # from its buffer by every reader: recomputing it would save no store, and would keep it from fusing
        # into its own producer (a GEMM's epilogue) for want of being that GEMM's only reader.
        stored = source in outputs or any(kernels[r].out not in marked for r in readers.get(source, ()))
        clone = None if stored else _clone(producer, kernel, names)
        users = sorted(readers[kernel.out])
        if any(not isinstance(kernels[r], ir.LoopKernel) or kernel.out in fuse.gathered(kernels[r]) for r in users):
            continue  # a scatter, or a gather's data: the producer stays a buffer M gives them
        only_reader = readers.get(source) == {k}
        fused = _fused_readers(clone, [kernels[r] for r in users], only_reader, cost_of, target, names)
        stats["fused" if fused else "declined"] += len(users)
        for r, new in zip(users, fused or [fuse.inline(kernel, kernels[r], names) for r in users]):
            replace_kernel(r, new)  # the producer computed in the reader, or read from its buffer through M's view
        if not readers[kernel.out]:
            replace_kernel(k, None)
    return fuse.with_kernels(program, [kernel for kernel in kernels if kernel is not None])


def _clone(producer: ir.Kernel | None, marked: ir.LoopKernel, names: Iterator[int]) -> ir.LoopKernel | None:
    """The marked kernel computing its producer's value itself, where the producer is a loop kernel to copy."""
    if not isinstance(producer, ir.LoopKernel) or fuse.attends(producer):
        return None
    return fuse.inline(producer, marked, names)


def _fused_readers(
    clone: ir.LoopKernel | None, users: list[ir.LoopKernel], only_reader: bool, cost_of: KernelCosts, target, names
) -> list[ir.LoopKernel] | None:
    """Every reader computing `clone` in its loop, or None: all or none, since the producer's kernel (and its
    store) goes away only when no reader is left, and the fused kernels together must cost no more than the
    producer and its readers as they are (a long element-wise chain read by three kernels stays stored)."""
    if clone is None:
        return None
    alone = only_reader and len(users) == 1
    fused = [_fused(clone, reader, alone, cost_of, target, names) for reader in users]
    if any(f is None for f in fused):
        return None
    before = cost_of(clone).seconds + sum(cost_of(r).seconds for r in users)
    return fused if sum(cost_of(f).seconds for f in fused) <= before else None


def _fused(
    clone: ir.LoopKernel, reader: ir.LoopKernel, alone: bool, cost_of: KernelCosts, target, names: Iterator[int]
) -> ir.LoopKernel | None:
    """`reader` computing `clone` in its loop, if that is a kernel worth generating (the module's list)."""
    if not fuse.may_inline(clone, reader, target):
        return None
    gemm = bool(limits.contracts(clone.body))
    if not alone and ir.holds(clone.body, ir.Reduce, ir.Contract):
        return None
    fused = fuse.inline(clone, reader, names)
    if not limits.within_limits(fused) or (gemm and gemm_plan.plan(fused) is None):
        return None
    if not fuse.reads_reduction_once(clone, reader):
        costs = [cost_of(x) for x in (clone, reader, fused)]
        if costs[2].flops > costs[0].flops + costs[1].flops:
            return None  # a reduction read where it is not hoisted (compiler/kernels/hoist.py) would run once per read
    return fused
