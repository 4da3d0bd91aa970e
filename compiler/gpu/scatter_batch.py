"""Consecutive in-place scatters as one launch ("scatters"): a paged decode step ends with every layer's key and
value scatters into their pools (compiler/kernels/in_place.py writes them where they lie), one launch each; as one, a
thread scatters its value of each of them.

A run of scatter launches is merged where the launches are consecutive in the plan (nothing runs between them),
each is its kernel's whole work (in place: no copy first), they scatter the same source shape (one grid), and
no scatter reads what another of the run writes (then their order does not matter). The merged kernel takes
the scatters' outputs first (`writes` of them), then what they read; MAX_BUFFERS bounds its pointer arguments
(a kernel's parameters are 4 KiB at most on older drivers).
"""

from __future__ import annotations

from luminal.compiler.gpu.launch import Launch
from luminal.compiler.gpu.launch_runs import MAX_BUFFERS, Planned, independent, merge_runs, on_one_grid
from luminal.compiler.kernels import ir


def _in_place_scatter(k: ir.Kernel, launch: Launch) -> bool:
    """Whether `launch` is all of kernel `k`'s work: a scatter into the buffer it reads whole (no copy)."""
    return isinstance(k, ir.ScatterKernel) and launch.shape == "scatter" and k.out in ir.buffers_read(k)


def _joins(run: list[Planned], planned: Planned) -> bool:
    """Whether `planned`, the one launch of scatter `k`, may join `run`, a run of merged scatters."""
    (k,), launch = planned
    members = [m for ks, _ in run for m in ks]
    first = members[0]
    if not _in_place_scatter(k, launch):
        return False
    if tuple(map(str, k.src_shape)) != tuple(map(str, first.src_shape)):
        return False
    return independent(k, members)


def merge_scatters(plan: list[Planned], max_buffers: int = MAX_BUFFERS) -> list[Planned]:
    """`plan` (each launch with the kernels it runs) with every run of mergeable scatters one launch."""

    def starts(planned: Planned) -> bool:
        return _in_place_scatter(planned[0][0], planned[1])

    return merge_runs(plan, starts, _joins, lambda run: on_one_grid(run, "scatters"), max_buffers)
