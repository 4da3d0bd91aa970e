"""An attention that reads a KV cache's concatenation computes it where it reads it, and so do the cache's other
readers: no [batch, kv_heads, past + 1, dim] buffer is built and no kernel launched for it.

A paged decode step (luminal/nn/models/paged_decoding.py) gathers each row's keys from the pool by its block
table and appends the step's own key; the attention reads that, and the pool's scatter reads the appended key
back (its last position). Fusion's policy (compiler/fusion/fuse.py) inlines a producer into a single reader only, and
the scatter is a second one. Here an element-wise temp read by an attention, and otherwise only by other loop
kernels or as a scatter's source, is inlined into all of them: the attention then loads keys and values from
the pool through the block table (its own key at the last position), and the scatter computes its source from
the projection. Index arithmetic through the cache's symbolic length is folded by the loop variables' extents
(compiler/kernels/bounded_index.py); where a result would exceed fusion's limits, nothing changes.

The concatenating decode step's caches are outputs of the step: built either way, they are left alone.
"""

from __future__ import annotations

from dataclasses import replace

from luminal.compiler.fusion.fuse import attends, inline, inline_value, may_inline, with_kernels
from luminal.compiler.fusion.limits import value_within_limits, within_limits
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.bounded_index import axes_extents, fold_value
from luminal.compiler.kernels.reduction_names import fresh_reduction_numbers


def _into_loop(producer: ir.LoopKernel, reader: ir.LoopKernel, target, names) -> ir.LoopKernel | None:
    if not may_inline(producer, reader, target):
        return None
    fused = inline(producer, reader, names)
    fused = replace(fused, body=fold_value(fused.body, axes_extents(fused.shape)))
    return fused if within_limits(fused) else None


def _into_scatter(producer: ir.LoopKernel, scatter: ir.ScatterKernel, names) -> ir.ScatterKernel | None:
    """The scatter with its source computing the producer's body; None when the producer is read elsewhere in
    it (its destination or its indices) or the result is too large."""
    if producer.out in ir.buffers_read(replace(scatter, src=ir.Const(0, scatter.src.dtype))):
        return None
    extents = axes_extents(scatter.src_shape)
    src = fold_value(inline_value(producer, scatter.src, extents, names), extents)
    return replace(scatter, src=src) if value_within_limits(src) else None


def _no_dearer(program: ir.KernelProgram, producer: ir.LoopKernel, kernels, fused: dict, target) -> bool:
    """Whether the readers computing the producer cost no more, by the roofline (compiler/analysis/cost.py), than the
    producer and its readers apart: the launch saved is priced in (a prefill's attention recomputing a key per
    query would not be)."""
    from luminal.compiler.analysis.cost import estimate

    def seconds(ks) -> float:
        return sum(estimate(k, program.buffers, target).seconds for k in ks)

    return seconds(fused.values()) <= seconds([producer, *(kernels[j] for j in fused)])


def attend_through_concatenations(program: ir.KernelProgram, target) -> ir.KernelProgram:
    """`program` with every eligible attention operand's producer computed by all its readers (module docstring)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel | None] = list(program.kernels)
    names = fresh_reduction_numbers(program)  # inlining renames reductions: above every number taken
    for k in range(len(kernels)):
        producer = kernels[k]  # as earlier inlining left it
        if not ir.element_wise(producer) or producer.out in outputs:
            continue
        users = [j for j, x in enumerate(kernels) if x is not None and producer.out in ir.buffers_read(x)]
        if not any(isinstance(kernels[j], ir.LoopKernel) and attends(kernels[j]) for j in users):
            continue
        fused = {}
        for j in users:
            reader = kernels[j]
            if isinstance(reader, ir.LoopKernel):
                fused[j] = _into_loop(producer, reader, target, names)
            elif isinstance(reader, ir.ScatterKernel):
                fused[j] = _into_scatter(producer, reader, names)
            else:
                fused[j] = None
        if any(f is None for f in fused.values()) or not _no_dearer(program, producer, kernels, fused, target):
            continue
        for j, f in fused.items():
            kernels[j] = f
        kernels[k] = None
    return with_kernels(program, [x for x in kernels if x is not None])
