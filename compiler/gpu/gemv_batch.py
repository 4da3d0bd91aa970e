"""Consecutive GEMVs as one launch ("gemvs"), in parts of the grid.

Side by side: a decode layer's q, k and v projections read the same normed vector and nothing of each other, so
one grid runs all three, each part its own blocks. One after the other: an MLP's up projection, whose epilogue
multiplies by silu of the gate projection's output at its own position, runs in the gate's part, after it in
each block: both have the same outputs per block, so what a block reads of the gate it stored itself, and the
up projection reads the normed row the gate staged in shared memory instead of staging it again.

On an H100 every kernel boundary costs about 1.3 us even inside a CUDA graph (notes/gpu.md), more than a 1B
model's key projection takes to stream its 2 MB of bf16 weights at 3 TB/s (0.7 us); and a key or value
projection of a grouped-query model has few outputs (512: 128 blocks of 4), fewer blocks than the GPU has SMs,
so alone it cannot keep enough loads in flight to reach the memory's bandwidth. Merged, the three are one grid
of 768 blocks.

A run of GEMV launches is merged where the launches are consecutive in the plan, a member reads what another
writes only as above (`segments`: the last part's members, at its own outputs, with the same shape, grid and row
groups), and the memory plan (compiler/analysis/memory.py) keeps every buffer a member touches alive until the run's
last kernel: the plan lets a kernel's output reuse the memory of a buffer whose last reader ran before it, which is
safe one kernel after another but not when blocks of the readers and the writer run at the same time. Members
staging their vectors in shared memory stage them in one array (one type), the largest member's size.
"""

from __future__ import annotations

import itertools

from luminal.compiler.analysis import gemv_plan, memory
from luminal.compiler.fusion.fuse import rename_reductions, substitute_indices
from luminal.compiler.gpu.launch import Launch, row_group, staged
from luminal.compiler.gpu.launch_runs import MAX_BUFFERS, Planned, member_buffers, merge_runs, reads_at_own_position
from luminal.compiler.kernels import ir
from luminal.compiler.renderer.dialects import COMPUTE
from luminal.symbolic import var


def staged_type(k: ir.LoopKernel) -> str | None:
    """The C type of `k`'s staged vector (compiler/gpu/gemv.py), or None where it stages none."""
    gemv = gemv_plan.plan(k)
    return COMPUTE[gemv.vector.dtype] if staged(k, gemv) else None


def _touched(k: ir.Kernel) -> set[str]:
    return ir.buffers_read(k) | {k.out}


def _follows(segment: list[ir.LoopKernel], k: ir.LoopKernel, launch: Launch, first: Launch) -> bool:
    """Whether GEMV `k` (its launch `launch`) may run after `segment` in the same blocks (`first`, the segment's
    first launch): the same outputs per block, and what it reads of the segment only at its own positions, which
    the block itself wrote."""
    reads = ir.buffers_read(k) & {m.out for m in segment}
    same = [tuple(map(str, m.shape)) for m in (segment[0], k)]
    if not reads or same[0] != same[1] or str(launch.grid) != str(first.grid):
        return False
    groups = {row_group(m, gemv_plan.plan(m)) for m in (segment[0], k)}
    return len(groups) == 1 and all(reads_at_own_position(k, b) for b in reads)


def _canonical(gemv: gemv_plan.GemvPlan) -> ir.Value:
    """The plan's vector with its variables named by position: the contraction's, then its sums' in order."""
    k = var("_lm_k", 0, max(gemv.reduction.extent.hi - 1, 0))
    return rename_reductions(substitute_indices(gemv.vector, {gemv.reduction.var: k}), itertools.count())


def shares_staging(before: ir.LoopKernel, k: ir.LoopKernel) -> bool:
    """Whether GEMV `k`, run after `before` in the same blocks, finds its vector staged already: both stage the
    same vector (the same expression but for the names of variables; a gate and an up projection of one normed
    row) in one pass (no row groups, whose passes stage row after row)."""
    plans = [(m, gemv_plan.plan(m)) for m in (before, k)]
    if not all(staged(m, gemv) and not row_group(m, gemv) for m, gemv in plans):
        return False
    return _canonical(plans[0][1]) == _canonical(plans[1][1])


def segments(members: tuple[ir.LoopKernel, ...]) -> list[list[ir.LoopKernel]]:
    """A merged launch's members by the blocks they share: a member that reads an earlier one's output runs in
    that member's blocks, after it; the others take blocks of their own."""
    parts: list[list[ir.LoopKernel]] = []
    for k in members:
        if parts and ir.buffers_read(k) & {m.out for m in parts[-1]}:
            parts[-1].append(k)
        else:
            parts.append([k])
    return parts


def _joins(run: list[Planned], planned: Planned, position: dict[str, int], spans) -> bool:
    """Whether `planned`, a launch of one GEMV `k`, may join `run`, a run of merged GEMVs."""
    ks, launch = planned
    if len(ks) != 1 or launch.shape != "gemv" or launch.block != run[0][1].block:
        return False
    (k,), members = ks, [m for kernels, _ in run for m in kernels]
    outs = {m.out for m in members}
    if k.out in outs or any(k.out in ir.buffers_read(m) for m in members):
        return False
    if ir.buffers_read(k) & outs:
        segment = segments(tuple(members))[-1]
        first = next(launch for kernels, launch in run if kernels[0] is segment[0])
        if not _follows(segment, k, launch, first) or ir.buffers_read(k) & (outs - {m.out for m in segment}):
            return False
    types = {staged_type(m) for m in [*members, k]} - {None}
    if len(types) > 1:
        return False  # one shared array of one type
    last = position[k.name]
    planned_buffers = {b for m in [*members, k] for b in _touched(m) if b in spans}
    return all(spans[b].last >= last for b in planned_buffers)  # or its memory may be another member's output


def _merged(run: list[Planned]) -> Planned:
    members = tuple(m for ks, _ in run for m in ks)
    grids = {ks[0].name: launch.grid for ks, launch in run}
    parts = [grids[segment[0].name] for segment in segments(members)]
    grid = parts[0]
    for part in parts[1:]:
        grid = grid + part
    name = f"{members[0].name}_to_{members[-1].name}_gemvs"
    return members, Launch(name, "gemvs", grid, run[0][1].block, member_buffers(list(members)), writes=len(members))


def merge_gemvs(plan: list[Planned], p: ir.KernelProgram, max_buffers: int = MAX_BUFFERS) -> list[Planned]:
    """`plan` (each launch with the kernels it runs) with every run of mergeable GEMVs one launch, of at most
    `max_buffers` pointer arguments."""
    position = {k.name: j for j, k in enumerate(p.kernels)}
    spans = memory.lifetimes(p)

    def joins(run: list[Planned], planned: Planned) -> bool:
        return _joins(run, planned, position, spans)

    return merge_runs(plan, lambda planned: planned[1].shape == "gemv", joins, _merged, max_buffers)
