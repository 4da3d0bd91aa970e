"""Runs of consecutive launches merged into one (compiler/gpu/scatter_batch.py, compiler/gpu/gemv_batch.py,
compiler/gpu/warp_batch.py): the walk over the plan they share, the pointer arguments of a merged launch, and
whether a member reads another's output only where it writes its own. A run stops where one more member would
take the merged launch past `max_buffers` pointer arguments (CUDA's MAX_BUFFERS; Metal binds fewer)."""

from __future__ import annotations

from typing import Callable

from luminal.compiler.gpu.launch import Launch
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.symbolic import as_expr
from luminal.view import contiguous_strides

Planned = tuple[tuple[ir.Kernel, ...], Launch]  # a launch with the kernels it runs
MAX_BUFFERS = 96  # pointer arguments of one merged launch: 768 bytes of parameters (4 KiB at most on old drivers)


def merge_runs(
    plan: list[Planned],
    starts: Callable[[Planned], bool],
    joins: Callable[[list[Planned], Planned], bool],
    merged: Callable[[list[Planned]], Planned],
    max_buffers: int = MAX_BUFFERS,
) -> list[Planned]:
    """`plan` with every run of consecutive launches that `joins` accepts, from one that `starts` one, as
    `merged` makes it (a run of one stays as it was), each within `max_buffers` pointer arguments."""

    def fits(run: list[Planned], planned: Planned) -> bool:
        return len(member_buffers([m for ks, _ in [*run, planned] for m in ks])) <= max_buffers

    out: list[Planned] = []
    run: list[Planned] = []
    for planned in plan:
        if run and joins(run, planned) and fits(run, planned):
            run.append(planned)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else merged(run))
            run = []
        if starts(planned):
            run = [planned]
        else:
            out.append(planned)
    if run:
        out.append(run[0] if len(run) == 1 else merged(run))
    return out


def on_one_grid(run: list[Planned], shape: str) -> Planned:
    """`run` as one launch of `shape` on its first launch's grid and block (members that share their grid: each
    block or thread runs every member), named after its first and last kernels."""
    members = tuple(m for ks, _ in run for m in ks)
    first = run[0][1]
    name = f"{members[0].name}_to_{members[-1].name}_{shape}"
    buffers = member_buffers(list(members))
    return members, Launch(name, shape, first.grid, first.block, buffers, writes=len(members))


def member_buffers(members: list[ir.Kernel]) -> tuple[str, ...]:
    """A merged launch's pointer arguments: the members' outputs first (the `writes`), then what they read."""
    outs = [m.out for m in members]
    reads = [b for m in members for b in ir.buffers_in_order(m) if b not in outs]
    return (*outs, *dict.fromkeys(reads))


def independent(k: ir.Kernel, members: list[ir.Kernel]) -> bool:
    """Whether `k` may run in one launch with `members`, in any order: it writes none of their outputs, reads
    none, and none of them reads its output."""
    outs = {m.out for m in members}
    return not (k.out in outs or ir.buffers_read(k) & outs or any(k.out in ir.buffers_read(m) for m in members))


def reads_at_own_position(k: ir.LoopKernel, buffer: str) -> bool:
    """Whether `k` reads `buffer` only at its own output's flat position (an axis of one element, or of a
    symbol whose maximum is 1, may read anything: its index is 0)."""
    names = [f"_i{j}" for j in range(len(k.shape))]
    strides = contiguous_strides(k.shape)
    wide = [j for j, d in enumerate(k.shape) if as_expr(d).hi > 1]
    for n in ir.walk(k.body):
        if isinstance(n, ir.GatherLoad) and n.buffer == buffer:
            return False
        if not isinstance(n, ir.Load) or n.buffer != buffer:
            continue
        found = affine(n.index, names)
        if found is None or not (found[0].is_const and found[0].value == 0):
            return False
        if any(found[1][names[j]] != strides[j] for j in wide):
            return False
    return True
