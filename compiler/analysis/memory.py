"""Memory plan: buffer lifetimes over the kernel order, then offsets in one arena that reuse dead space.

A temp or output buffer is live from the kernel that writes it to the last kernel that reads it; program
outputs stay live to the end, because the runtime copies them out only after the last kernel. Lifetimes are
closed intervals of kernel positions, so a kernel's output is live at the same position as everything the
kernel reads: the two never share memory. That is the invariant the generated code relies on, since every
kernel declares its pointers `restrict` (C) and reads inputs while it writes its output.

Inputs, weights and constants are bound by the caller and are not planned.

Sizes are symbolic: a plan is made for one concrete symbol binding (the runtime plans once per binding and
caches the arena). `upper_bound_plan` plans with every size at its largest value over the symbols' ranges,
which is what one allocation serving every binding would need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from luminal.compiler.kernels import ir

ALIGN = 64  # bytes: a cache line, and enough for any vector load the C compiler emits
PLANNED_ROLES = ("temp", "output")


@dataclass(frozen=True)
class Lifetime:
    """Kernel positions [first, last], both inclusive: the buffer's bytes must survive this whole span."""

    first: int
    last: int

    def overlaps(self, other: Lifetime) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass
class MemoryPlan:
    offsets: dict[str, int]  # buffer -> byte offset into the arena, a multiple of ALIGN
    sizes: dict[str, int]  # buffer -> bytes it occupies (at least one element: every pointer must be valid)
    arena_bytes: int  # the one allocation the plan needs
    naive_bytes: int  # one allocation per planned buffer, each rounded up to ALIGN: what reuse is measured against
    lifetimes: dict[str, Lifetime]


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def lifetimes(program: ir.KernelProgram, together: Iterable[Sequence[str]] = ()) -> dict[str, Lifetime]:
    """The live span of every temp/output buffer, in positions of `program.kernels`. `together`: the kernels
    (by name) of each launch that runs several at once (compiler/cuda/program.py's merged launches), whose
    threads run their members in any order relative to other threads: every buffer a member touches is live
    over the whole run, so no member's output takes the memory of what another member reads."""
    end = max(len(program.kernels) - 1, 0)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    # A temp labelled with a kernel's name is that kernel's own scratch (a split attention's partial results):
    # no IR kernel reads it, its launches do.
    scratch = {b.label: {b.name} for b in program.buffers.values() if b.role == "temp" and b.label}
    for pos, k in enumerate(program.kernels):
        for name in ir.buffers_read(k) | {k.out} | scratch.get(k.name, set()):
            first.setdefault(name, pos)
            last[name] = pos
    outputs = {buf for buf, _ in program.outputs.values()}
    spans = {}
    for name, buf in program.buffers.items():
        if buf.role not in PLANNED_ROLES:
            continue
        # A buffer no kernel touches (none today) still gets a valid span so it can be placed.
        lo, hi = first.get(name, 0), last.get(name, 0)
        spans[name] = Lifetime(lo, end if name in outputs or buf.role == "output" else hi)
    position = {k.name: pos for pos, k in enumerate(program.kernels)}
    for names in together:
        run = [program.kernels[position[name]] for name in names]
        lo, hi = min(position[name] for name in names), max(position[name] for name in names)
        for name in {b for k in run for b in ir.buffers_read(k) | {k.out}} & spans.keys():
            spans[name] = Lifetime(min(spans[name].first, lo), max(spans[name].last, hi))
    return spans


def assign_offsets(sizes: Mapping[str, int], spans: Mapping[str, Lifetime]) -> dict[str, int]:
    """Offsets such that buffers with overlapping lifetimes occupy disjoint bytes.

    Greedy by size, largest first (big buffers are the hardest to fit later): each buffer takes the smallest
    gap between the already-placed buffers whose lifetimes overlap its own that holds it (best fit), or goes
    above all of them. Ties break on name so a plan is deterministic.
    """
    placed: list[tuple[str, int, int]] = []  # (name, offset, aligned size)
    offsets: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], spans[n].first, n)):
        need = _align(sizes[name])
        busy = sorted((off, off + size) for other, off, size in placed if spans[other].overlaps(spans[name]))
        best, best_gap, cursor = None, None, 0
        for start, stop in busy:
            gap = start - cursor
            if gap >= need and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, stop)
        offsets[name] = cursor if best is None else best
        placed.append((name, offsets[name], need))
    return offsets


def _plan(program: ir.KernelProgram, element_count, together) -> MemoryPlan:
    spans = lifetimes(program, together)
    sizes = {n: max(element_count(program.buffers[n].size), 1) * program.buffers[n].dtype.itemsize for n in spans}
    offsets = assign_offsets(sizes, spans)
    arena = max((offsets[n] + _align(sizes[n]) for n in spans), default=0)
    naive = sum(_align(s) for s in sizes.values())
    return MemoryPlan(offsets, sizes, arena, naive, spans)


def plan(program: ir.KernelProgram, env: Mapping[str, int], together: Iterable[Sequence[str]] = ()) -> MemoryPlan:
    """The plan for one concrete binding of the program's symbols (`together`: as for `lifetimes`)."""
    return _plan(program, lambda size: int(size.evaluate(dict(env))), together)


def upper_bound_plan(program: ir.KernelProgram, together: Iterable[Sequence[str]] = ()) -> MemoryPlan:
    """The plan with every size at its upper bound over the symbols' declared ranges."""
    return _plan(program, lambda size: int(size.hi), together)


def describe(
    program: ir.KernelProgram, env: Mapping[str, int] | None = None, together: Iterable[Sequence[str]] = ()
) -> dict:
    """Figures for `CompiledProgram.report`: the exact plan for `env`, else the bound over the symbol ranges."""
    exact = env is not None or not program.symbols
    p = plan(program, env or {}, together) if exact else upper_bound_plan(program, together)
    return {
        "arena_bytes": p.arena_bytes,
        "naive_bytes": p.naive_bytes,
        "planned_buffers": len(p.offsets),
        "bound": "exact" if exact else "symbol maxima",
    }
