"""Letting go of the float32 weights a loaded CPU language model no longer reads.

The CPU runtime packs each linear layer's weight into GEMM panels once, at load (the run plan's `packed_only`), and its
kernels read the panels from then on; the weights themselves stayed resident beside them, twice the weight
memory. After loading, the weights some program still reads (embeddings read by a gather, norms, biases, int8
weights read in place, a weight tied to one of those) are copied out on their own, and every program is bound to
the copies; the rest are dropped from the programs and their graphs, and with them the file's weight buffer,
whose views they all were. Only where that frees more than it copies, and only for plain CPU executables (a
device runtime's shim holds its weights its own way).
"""

from __future__ import annotations

import numpy as np

from luminal.compiler.program import CompiledProgram
from luminal.runtime.cpu import CpuExecutable


def release_packed_weights(programs: list[CompiledProgram]) -> int:
    """Drop the weights no program's run reads (bound to the same arrays or not); returns the bytes dropped (0:
    nothing done). The programs must be prepared (their panels packed)."""
    executables = [p._executable for p in programs]
    if not programs or any(type(e) is not CpuExecutable for e in executables):
        return 0
    held: dict[int, np.ndarray] = {}  # every bound weight array, by identity
    read: dict[int, np.ndarray] = {}  # those some program's run reads
    for program in programs:
        unread = set(program.plan.packed_only)  # the run plan's: what the CPU backend packs and never reads
        for label, array in program.graph.weight_data.items():
            held[id(array)] = array
            buf = program.kernels.weights.get(label)
            if buf is not None and buf not in unread:
                read[id(array)] = array
    dropped = sum(a.nbytes for key, a in held.items() if key not in read)
    if dropped <= sum(a.nbytes for a in read.values()):
        return 0  # copying what is read would cost as much as it frees
    copies = {key: np.array(a, copy=True) for key, a in read.items()}
    for program, executable in zip(programs, executables):
        kept = {label: copies[id(a)] for label, a in program.graph.weight_data.items() if id(a) in copies}
        executable.rebind_weights(kept)
        program.graph.weight_data = kept
    return dropped
