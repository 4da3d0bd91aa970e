"""Consecutive independent thread kernels over the same elements as one launch ("threads").

What a model leaves as element-wise kernels in a row are copies into its outputs' layouts: a prefill writes each
layer's values into the cache's [batch, heads, seq, dim] layout beside its keys' RoPE (compiler/gpu/copy_order.py
moves each copy there from after the last layer), and a concatenating decode step writes each layer's key and
value caches, past and new, side by side.
Each is a kernel boundary (~1.3 us even inside a CUDA graph, notes/gpu.md) for a few microseconds of copying;
in one launch each thread computes every member at its element, in turn, each in a scope of its own.

A run of thread launches is merged where the launches are consecutive in the plan, of one shape and grid, and
no member reads or writes what another writes (a thread runs its members in order, but threads run in any
order, so a member may not read an output another thread may not have written yet). Copies read buffers that
die with them, so a later member's output could take an earlier one's input's memory: the memory plan keeps
whatever a merged launch's members touch live over the whole run (compiler/analysis/memory.py's `together`).
"""

from __future__ import annotations

from luminal.compiler.gpu.launch_runs import MAX_BUFFERS, Planned, independent, merge_runs, on_one_grid
from luminal.compiler.kernels import ir


def _joins(run: list[Planned], planned: Planned) -> bool:
    """Whether `planned`, one thread kernel's launch, may join `run`, a run of merged thread kernels."""
    ks, launch = planned
    first = run[0][1]
    if len(ks) != 1 or launch.shape != "thread" or (str(launch.grid), launch.block) != (str(first.grid), first.block):
        return False
    (k,), members = ks, [m for kernels, _ in run for m in kernels]
    if not isinstance(k, ir.LoopKernel) or tuple(map(str, k.shape)) != tuple(map(str, members[0].shape)):
        return False
    return independent(k, members)


def merge_threads(plan: list[Planned], max_buffers: int = MAX_BUFFERS) -> list[Planned]:
    """`plan` (each launch with the kernels it runs) with every run of mergeable thread kernels one launch."""

    def starts(planned: Planned) -> bool:
        return planned[1].shape == "thread" and isinstance(planned[0][0], ir.LoopKernel)

    return merge_runs(plan, starts, _joins, lambda run: on_one_grid(run, "threads"), max_buffers)
