"""One shape bucket on the device: its allocation (laid out by layout.py), each launch's arguments, and the CUDA
graph captured for it. Everything here stays put for the executable's life, which is what lets a captured graph
be launched again: it baked in these very pointers."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from luminal.compiler import ir
from luminal.compiler.cuda.launch import Launch
from luminal.runtime.cuda.layout import layout


class DeviceArena:
    def __init__(self, cp: Any, program: ir.KernelProgram, env: Mapping[str, int], resident: Mapping[str, Any],
                 tail: tuple):  # fmt: skip
        """`cp` is the cupy module; `env` the bucket's dims; `resident` the weights' device arrays by buffer;
        `tail` the device arrays every kernel takes last: the dims block D and the status flag."""
        self.cp, self.tail = cp, tail
        self.env = dict(env)
        self.layout = layout(program, env)
        self.memory = cp.cuda.alloc(max(self.layout.total, 1))  # one allocation: a cupy MemoryPointer
        self.pointers = {buf: self.memory + offset for buf, offset in self.layout.offsets.items()}
        self.pointers |= {buf: array.data for buf, array in resident.items()}
        self.graph = None  # a cupy.cuda.Graph, captured at this bucket's grids on its first graph run

    def arguments(self, launch: Launch) -> tuple:
        """A kernel's arguments: its buffers in launch order, then D and lm_status (compiler/cuda/launch.py)."""
        return (*(self.pointers[b] for b in launch.buffers), *self.tail)

    def view(self, buf: str, count: int, storage: np.dtype):
        """The first `count` elements of `buf` as a flat cupy array of dtype `storage` (no copy)."""
        return self.cp.ndarray((count,), storage, memptr=self.pointers[buf])
