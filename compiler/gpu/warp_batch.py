"""Consecutive warp kernels over the same elements as one launch ("warps"), each warp running them in turn.

A LayerNorm whose statistics several kernels read (the normalisation, and a GEMM epilogue that recomputes the
residual) keeps them as two warp kernels: the row's mean, then its variance, which reads the mean at its own row.
In one launch a warp computes the mean, stores it for the other readers, and computes the variance from the
value it holds (every lane has a fold's whole result, compiler/gpu/emitter.py): one launch and one read of the
mean fewer per norm, two per layer of an encoder.

A run of warp launches is merged where the launches are consecutive in the plan, of one shape and grid, a member
reads an earlier one's output only at its own position and where that output's storage type is the type the
value is computed in (so the held value is what a load would read), no member writes what an earlier one reads,
and the memory plan keeps every buffer a member touches alive until the run's last kernel (as for "gemvs",
compiler/gpu/gemv_batch.py: warps of different members run at the same time).
"""

from __future__ import annotations

from luminal.compiler.analysis import memory
from luminal.compiler.gpu.launch_runs import MAX_BUFFERS, Planned, merge_runs, on_one_grid, reads_at_own_position
from luminal.compiler.kernels import ir
from luminal.compiler.renderer.dialects import COMPUTE, CUDA


def _held_exactly(buffer: ir.Buffer) -> bool:
    """Whether a value stored in `buffer` reads back unchanged (no narrower storage type)."""
    return CUDA.storage[buffer.dtype] == COMPUTE[buffer.dtype]


def _joins(run: list[Planned], planned: Planned, p: ir.KernelProgram, position: dict[str, int], spans) -> bool:
    ks, launch = planned
    first = run[0][1]
    if len(ks) != 1 or launch.shape != "warp" or (str(launch.grid), launch.block) != (str(first.grid), first.block):
        return False
    (k,), members = ks, [m for kernels, _ in run for m in kernels]
    if tuple(map(str, k.shape)) != tuple(map(str, members[0].shape)):
        return False
    outs = {m.out for m in members}
    if k.out in outs or any(k.out in ir.buffers_read(m) for m in members):
        return False
    for b in ir.buffers_read(k) & outs:
        if not _held_exactly(p.buffers[b]) or not reads_at_own_position(k, b):
            return False
    touched = {b for m in [*members, k] for b in ir.buffers_read(m) | {m.out} if b in spans}
    return all(spans[b].last >= position[k.name] for b in touched)  # or its memory may be another member's output


def merge_warps(plan: list[Planned], p: ir.KernelProgram, max_buffers: int = MAX_BUFFERS) -> list[Planned]:
    """`plan` (each launch with the kernels it runs) with every run of mergeable warp kernels one launch, of at
    most `max_buffers` pointer arguments."""
    position = {k.name: j for j, k in enumerate(p.kernels)}
    spans = memory.lifetimes(p)

    def joins(run: list[Planned], planned: Planned) -> bool:
        return _joins(run, planned, p, position, spans)

    def merged(run: list[Planned]) -> Planned:
        return on_one_grid(run, "warps")

    return merge_runs(plan, lambda planned: planned[1].shape == "warp", joins, merged, max_buffers)
