"""Consecutive independent GEMVs as one launch ("gemvs"): a decode layer's q, k and v projections read the same
normed vector and nothing of each other, so one grid runs all three, each block taking its part by block index.

On an H100 every kernel boundary costs about 1.3 us even inside a CUDA graph (notes/gpu.md), more than a 1B
model's key projection takes to stream its 2 MB of bf16 weights at 3 TB/s (0.7 us); and a key or value
projection of a grouped-query model has few outputs (512: 128 blocks of 4), fewer blocks than the GPU has SMs,
so alone it cannot keep enough loads in flight to reach the memory's bandwidth. Merged, the three are one grid
of 768 blocks.

A run of GEMV launches is merged where the launches are consecutive in the plan, no member reads what another
writes, and the memory plan (compiler/memory.py) keeps every buffer a member touches alive until the run's last
kernel: the plan lets a kernel's output reuse the memory of a buffer whose last reader ran before it, which is
safe one kernel after another but not when blocks of the readers and the writer run at the same time. Members
staging their vectors in shared memory stage them in one array (one type), the largest member's size.
"""

from __future__ import annotations

from luminal.compiler import gemv_plan, ir, memory
from luminal.compiler.cuda.launch import Launch, staged
from luminal.compiler.cuda.launch_runs import Planned, member_buffers, merge_runs
from luminal.compiler.dialects import COMPUTE

MAX_BUFFERS = 96  # pointer arguments of one merged launch, as compiler/cuda/scatter_batch.py bounds them


def staged_type(k: ir.LoopKernel) -> str | None:
    """The C type of `k`'s staged vector (compiler/cuda/gemv.py), or None where it stages none."""
    gemv = gemv_plan.plan(k)
    return COMPUTE[gemv.vector.dtype] if staged(k, gemv) else None


def _touched(k: ir.Kernel) -> set[str]:
    return ir.buffers_read(k) | {k.out}


def _joins(run: list[Planned], planned: Planned, position: dict[str, int], spans) -> bool:
    """Whether `planned`, a launch of one GEMV `k`, may join `run`, a run of merged GEMVs."""
    ks, launch = planned
    if len(ks) != 1 or launch.shape != "gemv" or launch.block != run[0][1].block:
        return False
    (k,), members = ks, [m for kernels, _ in run for m in kernels]
    outs = {m.out for m in members}
    if k.out in outs or ir.buffers_read(k) & outs or any(k.out in ir.buffers_read(m) for m in members):
        return False
    types = {staged_type(m) for m in [*members, k]} - {None}
    if len(types) > 1:
        return False  # one shared array of one type
    last = position[k.name]
    planned_buffers = {b for m in [*members, k] for b in _touched(m) if b in spans}
    if any(spans[b].last < last for b in planned_buffers):
        return False  # its memory may be another member's output
    return len(member_buffers([*members, k])) <= MAX_BUFFERS


def _merged(run: list[Planned]) -> Planned:
    members = tuple(m for ks, _ in run for m in ks)
    grid = run[0][1].grid
    for _, launch in run[1:]:
        grid = grid + launch.grid
    name = f"{members[0].name}_to_{members[-1].name}_gemvs"
    return members, Launch(name, "gemvs", grid, run[0][1].block, member_buffers(list(members)), writes=len(members))


def merge_gemvs(plan: list[Planned], p: ir.KernelProgram) -> list[Planned]:
    """`plan` (each launch with the kernels it runs) with every run of mergeable GEMVs one launch."""
    position = {k.name: j for j, k in enumerate(p.kernels)}
    spans = memory.lifetimes(p)

    def joins(run: list[Planned], planned: Planned) -> bool:
        return _joins(run, planned, position, spans)

    return merge_runs(plan, lambda planned: planned[1].shape == "gemv", joins, _merged)
