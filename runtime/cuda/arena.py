"""One shape bucket on the device: its allocation (laid out by layout.py), each launch's arguments, and the CUDA
graph captured for it. Everything here stays put for the executable's life, which is what lets a captured graph
be launched again: it baked in these very pointers."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import Launch
from luminal.runtime.cuda.layout import layout


class DeviceArena:
    def __init__(self, cp: Any, program: ir.KernelProgram, env: Mapping[str, int], resident: Mapping[str, Any],
                 tail: tuple, together: tuple = ()):  # fmt: skip
        """`cp` is the cupy module; `env` the bucket's dims; `resident` the weights' device arrays by buffer;
        `tail` the device arrays every kernel takes last: the dims block D and the status flag; `together` the
        kernels of each merged launch (layout.py)."""
        self.cp, self.tail = cp, tail
        self.env = dict(env)
        self.layout = layout(program, env, together)
        self.memory = cp.cuda.alloc(max(self.layout.total, 1))  # one allocation: a cupy MemoryPointer
        self.pointers = {buf: self.memory + offset for buf, offset in self.layout.offsets.items()}
        self.pointers |= {buf: array.data for buf, array in resident.items()}
        self.own = dict(self.pointers)  # where each buffer lives when no caller's array is bound in its place
        self.bound: dict[str, Any] = {}  # buffer -> the caller's device array bound in place (kept alive here)
        self.graph = None  # a cupy.cuda.Graph, captured at this bucket's grids on its first graph run

    def bind(self, buf: str, array: Any | None) -> None:
        """Point `buf` at the caller's device array (a donated input written in place), or back at its own slot
        when `array` is None. The captured graph baked in the old pointer: it is dropped when the pointer moves."""
        pointer = self.own[buf] if array is None else array.data
        if pointer.ptr != self.pointers[buf].ptr:
            self.pointers[buf], self.graph = pointer, None
        if array is None:
            self.bound.pop(buf, None)
        else:
            self.bound[buf] = array

    def arguments(self, launch: Launch) -> tuple:
        """A kernel's arguments: its buffers in launch order, then D and lm_status (compiler/storage/run_plan.py)."""
        return (*(self.pointers[b] for b in launch.buffers), *self.tail)

    def view(self, buf: str, count: int, storage: np.dtype):
        """The first `count` elements of `buf` as a flat cupy array of dtype `storage` (no copy)."""
        return self.cp.ndarray((count,), storage, memptr=self.pointers[buf])
