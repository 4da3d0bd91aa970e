"""A value some kernel stores anyway is read from its buffer where another kernel would recompute it.

Fusion inlines an element-wise producer into each reader that may compute it, and keeps it stored for a reader
that may not (a GEMM reads its operands from memory). A transformer layer's LayerNorm is such a producer: the
next GEMM reads the normalised rows as its operand, while the residual after that GEMM recomputes them in its
epilogue, from the row statistics. The statistics then have two readers, so they stay a launch of their own,
apart from the kernel that applies them: on a GPU, two launches per LayerNorm where one kernel per row could
compute both (a MiniLM-shaped encoder: two LayerNorms in each of its 6 layers).

Here each such recomputation reads the stored value instead, when it is the producer's whole value at the same
positions (a reader over the same shape, the subtree equal to the producer's body, and the buffer holding
that value in its own type) and reads at least two buffers (one load in place of several). The statistics are
then read by one kernel, which fusion's policy (compiler/fusion/fuse.py) may then inline them into.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.kernels import ir
from luminal.view import ShapeTracker

# The float types each float type converts to exactly: a value cast up and back is itself.
WIDER = {dt.bfloat16: (dt.float32, dt.float64), dt.float16: (dt.float32, dt.float64), dt.float32: (dt.float64,)}


def _stored(k: ir.Kernel, buffers: dict[str, ir.Buffer]) -> bool:
    """Whether `k` stores a value worth reading back: its body in its own type, computed from two buffers."""
    if not isinstance(k, ir.LoopKernel) or isinstance(k.body, ir.Load):
        return False
    return buffers[k.out].dtype == k.body.dtype and len(ir.buffers_read(k)) >= 2


def _forms(stored: ir.LoopKernel, load: ir.Load) -> list[tuple[ir.Value, ir.Value]]:
    """(a value a reader may recompute, what reads it from the stored buffer): the stored body, and the value
    under its widening cast (a GEMM operand widened to float32), narrowed back exactly."""
    forms: list[tuple[ir.Value, ir.Value]] = [(stored.body, load)]
    body = stored.body
    if isinstance(body, ir.Apply) and body.op == "Cast" and body.dtype in WIDER.get(body.args[0].dtype, ()):
        inner = body.args[0]
        forms.append((inner, ir.Apply("Cast", (load,), inner.dtype)))
    return forms


def read_stored_values(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with each recomputation of an earlier kernel's stored value read from its buffer."""
    kernels = list(program.kernels)
    for j, stored in enumerate(program.kernels):
        if not _stored(stored, program.buffers):
            continue
        needs = ir.buffers_read(stored)
        forms = _forms(stored, ir.Load(stored.out, ShapeTracker.contiguous(stored.shape).index, stored.body.dtype))
        for r in range(j + 1, len(kernels)):
            reader = kernels[r]
            if not isinstance(reader, ir.LoopKernel) or reader.shape != stored.shape:
                continue
            if needs <= ir.buffers_read(reader) and reader.body != stored.body:
                kernels[r] = _reading(reader, forms)
    return replace(program, kernels=kernels)


def _reading(reader: ir.LoopKernel, forms: list[tuple[ir.Value, ir.Value]]) -> ir.LoopKernel:
    """`reader` with each subtree that is one of the forms' values replaced by its read."""

    def stored_value(n: ir.Value) -> ir.Value | None:
        return next((read for value, read in forms if n == value), None)

    return replace(reader, body=ir.rebuilt(reader.body, stored_value))
