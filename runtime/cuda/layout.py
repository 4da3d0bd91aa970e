"""Where every buffer of a program lives in a shape bucket's one device allocation.

The temps and outputs are laid out by the memory plan (compiler/analysis/memory.py) at the bucket's dims; the inputs
follow in slots of their own, sized for the bucket too. A CUDA graph bakes in every pointer it launches with, so the
inputs must be copied into stable addresses rather than bound where the caller's arrays happen to be; and the
outputs are read from the arena, which stays put between runs. Weights are resident apart (one upload per load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from luminal.compiler.analysis import memory
from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import Launch


@dataclass(frozen=True)
class Layout:
    offsets: dict[str, int]  # buffer -> byte offset in the allocation, a multiple of memory.ALIGN
    sizes: dict[str, int]  # buffer -> bytes it may occupy at the bucket's dims (at least one element)
    total: int  # bytes of the one allocation


def _aligned(n: int) -> int:
    return -(-n // memory.ALIGN) * memory.ALIGN


def layout(program: ir.KernelProgram, env: Mapping[str, int], together: Sequence[Sequence[str]] = ()) -> Layout:
    """The layout at dims `env` (a bucket's): the memory plan's arena, then one slot per input. `together`: the
    kernels of each merged launch (the run plan's `together`)."""
    plan = memory.plan(program, env, together)
    offsets, sizes, cursor = dict(plan.offsets), dict(plan.sizes), plan.arena_bytes
    for buf in sorted(set(program.inputs.values())):
        b = program.buffers[buf]
        sizes[buf] = max(int(b.size.evaluate(dict(env))), 1) * b.dtype.itemsize
        offsets[buf] = cursor
        cursor += _aligned(sizes[buf])
    return Layout(offsets, sizes, cursor)


def launches_at(plan: list[Launch], env: Mapping[str, int]) -> list[tuple[Launch, int]]:
    """Each launch with its block count at dims `env`; launches of zero blocks are left out (CuPy would launch
    one block for a zero grid)."""
    counted = [(launch, int(launch.grid.evaluate(dict(env)))) for launch in plan]
    return [(launch, blocks) for launch, blocks in counted if blocks > 0]
