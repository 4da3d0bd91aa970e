"""Kernels that are functions of their indices, the symbols and read-only buffers alone, computed where they are
read.

A decode step starts with such kernels: RoPE's inverse frequencies, the position as a float and its cosines and
sines, the causal mask's rows. Each is tiny, yet costs a launch, and the policy in fuse.py leaves it alone
because many kernels read it. So do copies of weights (a bf16 encoder's LayerNorm scale and shift, copied once
per norm: four launches a layer) and functions of inputs (an attention mask's logarithm). On a GPU a launch
costs more than recomputing a few transcendentals where they are used, so each one (element-wise, no reduction,
a small tree) that reads no buffer, or only weights and inputs that no kernel writes (nothing can change them
between the copy and its readers), is inlined into every kernel that reads it, scatters included (a paged step's
pool positions, computed from its slots, feed only scatters); one that read only such kernels becomes one
itself, so chains go too.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from luminal.compiler.fusion.fuse import gathered, inline, inline_value, may_inline, with_kernels
from luminal.compiler.fusion.limits import too_large_inlined, tree_within, value_within_limits, within_limits
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.bounded_index import axes_extents, fold_value
from luminal.compiler.kernels.reduction_names import fresh_reduction_numbers

MAX_NODES = 64  # a producer's value tree, counted with repetition: what is recomputed at each read


def _recomputable(k: ir.Kernel, outputs: set[str], read_only: set[str]) -> bool:
    if not ir.element_wise(k) or k.out in outputs or not ir.buffers_read(k) <= read_only:
        return False
    return len(list(itertools.islice(ir.walk(k.body), MAX_NODES + 1))) <= MAX_NODES


def _computing(producer: ir.LoopKernel, user: ir.Kernel, target, names) -> ir.Kernel | None:
    """`user` computing `producer` where it reads it, or None where it may not: a scatter computes it in its
    indices, its values and its destination (a paged step's slots and positions feed only scatters)."""
    if isinstance(user, ir.LoopKernel):
        if not may_inline(producer, user, target) or too_large_inlined(producer, user):
            return None
        fused = inline(producer, user, names)
        if within_limits(fused):
            return fused
        if not tree_within(fused.body):  # folding indices keeps every node: too many stay too many
            return None
        # Too large as written (a paged step's mask rows in its attention): its indices folded may fit. (After
        # fusion compiler/kernels/fold_indices.py folds every index where that removes a division by a symbol.)
        fused = replace(fused, body=fold_value(fused.body, axes_extents(fused.shape)))
        return fused if within_limits(fused) else None
    if producer.out in gathered(user):
        return None
    over_src, over_dest = axes_extents(user.src_shape), axes_extents(user.shape)
    at, src = (inline_value(producer, v, over_src, names) for v in (user.at, user.src))
    dest = inline_value(producer, user.dest, over_dest, names)
    if not all(value_within_limits(v) for v in (at, src, dest)):
        return None
    return replace(user, at=at, src=src, dest=dest)


def inline_index_functions(program: ir.KernelProgram, target, integer_only: bool = False) -> ir.KernelProgram:
    """`program` with every kernel of its indices and read-only buffers computed by its readers instead (where
    each may compute it); with `integer_only`, only those of integer values (positions: cheap to recompute where
    no launch is saved, as on a CPU)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel] = list(program.kernels)
    # Not read-only: what a kernel writes, and a scatter's destination (compiler/kernels/in_place.py may later write it
    # in place, a donated KV pool).
    written = {k.out for k in kernels} | {
        n.buffer for k in kernels if isinstance(k, ir.ScatterKernel) for n in ir.walk(k.dest) if isinstance(n, ir.Load)
    }
    read_only = {b.name for b in program.buffers.values() if b.role in ("input", "weight")} - written
    names = fresh_reduction_numbers(program)  # inlining renames reductions: above every number taken
    changed = True
    while changed:
        changed = False
        readers: dict[str, list[int]] = {}
        for j, kernel in enumerate(kernels):
            for name in ir.buffers_read(kernel):
                readers.setdefault(name, []).append(j)
        for k, producer in enumerate(kernels):
            users = readers.get(producer.out, [])
            if not users or not _recomputable(producer, outputs, read_only):
                continue
            if integer_only and not (isinstance(producer, ir.LoopKernel) and producer.body.dtype.is_int):
                continue
            fused = {u: _computing(producer, kernels[u], target, names) for u in users}
            if any(f is None for f in fused.values()):
                continue
            kernels = [fused.get(j, kernel) for j, kernel in enumerate(kernels) if j != k]
            changed = True
            break  # positions moved: recount the readers
    return with_kernels(program, kernels)
