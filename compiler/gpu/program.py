"""The launches and kernel sources the CUDA and Metal programs share: each kernel's own launches, the merges of
consecutive launches, and the source of one launch in the CUDA dialect (Metal re-signs it: compiler/metal/).

A launch's kernel is written by its shape's generator (kernels.py, gemv.py, gemm.py, attention.py,
flash_decode.py); a merged launch by its merge's writer. A backend with launch shapes of its own (CUDA's
tensor-core and library GEMMs: compiler/cuda/program.py) passes its own `kernel_source`, which falls back on
`shared_kernel_source`.
"""

from __future__ import annotations

from typing import Callable

from luminal.compiler.analysis import gemv_plan
from luminal.compiler.analysis.gemm_plan import plan
from luminal.compiler.gpu import (
    attention,
    flash_decode,
    gemm,
    gemv,
    gemv_batch,
    kernels,
    scatter_batch,
    thread_batch,
    warp_batch,
)
from luminal.compiler.gpu.launch import Launch, launches
from luminal.compiler.gpu.launch_runs import MAX_BUFFERS, Planned
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.in_place import written_inputs
from luminal.compiler.storage.run_plan import RunPlan

KernelSource = Callable[[Launch, ir.Kernel, ir.KernelProgram, list[str]], list[str]]


def own_launches(k: ir.Kernel, p: ir.KernelProgram) -> list[Launch]:
    """The launches of kernel `k` as compiler/gpu/launch.py plans them, before a backend's own shapes."""
    return launches(k, ir.buffers_in_order(k))


def merged(plan: list[Planned], p: ir.KernelProgram, max_buffers: int = MAX_BUFFERS) -> list[Planned]:
    """`plan` (each launch with its one kernel) with its runs of scatters, GEMVs, warp kernels and thread kernels
    merged, each merged launch within `max_buffers` pointer arguments (Metal's plan too: compiler/metal/)."""
    plan = gemv_batch.merge_gemvs(scatter_batch.merge_scatters(plan, max_buffers), p, max_buffers)
    return thread_batch.merge_threads(warp_batch.merge_warps(plan, p, max_buffers), max_buffers)


def together(planned: list[Planned]) -> list[tuple[str, ...]]:
    """The kernels (by name) of each planned launch that runs several: the memory plan keeps what they touch live
    over the whole run (compiler/analysis/memory.py's `together`)."""
    return [tuple(k.name for k in members) for members, _ in planned if len(members) > 1]


def run_plan(p: ir.KernelProgram, planned_launches: Callable[..., list[Planned]]) -> RunPlan:
    """What a GPU runtime and its host shim read of the program instead of planning it again: the launches of a
    run and of the load (`planned_launches(p, at_load=...)`, the backend's planner), the merged launches' kernels,
    the donated inputs written in place."""
    planned = planned_launches(p)
    return RunPlan(
        launches=tuple(launch for _, launch in planned),
        at_load=tuple(launch for _, launch in planned_launches(p, at_load=True)),
        together=tuple(together(planned)),
        written_inputs=written_inputs(p),
    )


def shared_kernel_source(launch: Launch, k: ir.Kernel, p: ir.KernelProgram, symbols: list[str]) -> list[str]:
    """The source of a launch of one kernel, by the launch's shape; its first line is its signature."""
    buffers = p.buffers
    if launch.shape == "copy":
        return kernels.thread_kernel(launch, k.shape, k.dest, buffers, symbols)
    if launch.shape == "scatter":
        return kernels.scatter_kernel(launch, k, buffers, symbols)
    if launch.shape == "gemv":
        return gemv.kernel_source(launch, k, gemv_plan.plan(k), buffers, symbols)
    if launch.shape == "gemm":
        return gemm.kernel_source(launch, k, plan(k), buffers, symbols)
    if launch.shape == "combine":
        return flash_decode.combine_source(launch, k, buffers, symbols)
    if launch.shape in ("attention", "attention_split", "flash_decode"):
        return attention.kernel_source(launch, k, buffers, symbols)
    if launch.shape == "row":
        return kernels.row_kernel(launch, k, buffers, symbols)
    if launch.shape == "warp":
        return kernels.warp_kernel(launch, k, buffers, symbols)
    return kernels.thread_kernel(launch, k.shape, k.body, buffers, symbols)


def launch_source(
    launch: Launch,
    members: tuple[ir.Kernel, ...],
    p: ir.KernelProgram,
    symbols: list[str],
    kernel_source: KernelSource = shared_kernel_source,
) -> list[str]:
    """The kernel of one launch of the plan, merged or not; its first line is its signature."""
    if launch.shape == "scatters":
        return kernels.scatters_kernel(launch, list(members), p.buffers, symbols)
    if launch.shape == "warps":
        return kernels.warps_kernel(launch, list(members), p.buffers, symbols)
    if launch.shape == "threads":
        return kernels.threads_kernel(launch, list(members), p.buffers, symbols)
    if launch.shape == "gemvs":
        segments = gemv_batch.segments(members)
        grids = [own_launches(segment[0], p)[0].grid for segment in segments]
        return gemv.batch_source(launch, segments, grids, p.buffers, symbols)
    return kernel_source(launch, members[0], p, symbols)
