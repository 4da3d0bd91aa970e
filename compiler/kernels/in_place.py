"""Scatters into donated inputs, in place: the kernel writes the caller's array instead of copying it first.

A graph may donate an input to an output (`Graph.donate`: a KV pool the decode step updates). A scatter whose
destination is that input read whole, and whose buffer is that output and read by nothing else, then takes the
input's buffer as its own: the element-wise copy of the destination disappears (code generators skip it when a
scatter's buffer is an input) and only the scattered values are written. It runs last, after every kernel
that still reads the input's old contents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from luminal.compiler.fusion.fuse import with_kernels
from luminal.compiler.kernels import ir
from luminal.view import ShapeTracker


def is_in_place(kernel: ir.Kernel, buffers: Mapping[str, ir.Buffer]) -> bool:
    """True for a scatter writing an input's buffer: its destination copy is not emitted."""
    return isinstance(kernel, ir.ScatterKernel) and buffers[kernel.out].role == "input"


def written_inputs(program: ir.KernelProgram) -> dict[str, str]:
    """The donated inputs a scatter writes in place (input buffer -> input name): what a GPU runtime binds where
    the caller holds the array instead of copying it into its slot."""
    return {b: label for label, b in program.inputs.items() if any(k.out == b for k in program.kernels)}


def scatter_in_place(program: ir.KernelProgram, donated: Mapping[str, str]) -> ir.KernelProgram:
    """`program` with each eligible scatter writing its donated input's buffer (see the module docstring)."""
    moved: dict[int, ir.ScatterKernel] = {}
    outputs = dict(program.outputs)
    for output, source in donated.items():
        if output not in outputs or source not in program.inputs:
            continue
        out_buf, shape = outputs[output]
        in_buf = program.inputs[source]
        writers = [i for i, k in enumerate(program.kernels) if k.out == out_buf]
        if len(writers) != 1 or not isinstance(program.kernels[writers[0]], ir.ScatterKernel):
            continue
        kernel = program.kernels[writers[0]]
        whole = ir.Load(in_buf, ShapeTracker.contiguous(kernel.shape).index, program.buffers[in_buf].dtype)
        read_elsewhere = any(out_buf in ir.buffers_read(k) for k in program.kernels)
        # Another output of the same buffer, or an output that is the input itself, must keep its own contents.
        others = [o for o, (b, _) in outputs.items() if b in (out_buf, in_buf) and o != output]
        if kernel.dest != whole or read_elsewhere or others:
            continue
        moved[writers[0]] = replace(kernel, out=in_buf, dest=whole)
        outputs[output] = (in_buf, shape)
    if not moved:
        return program
    kept = [k for i, k in enumerate(program.kernels) if i not in moved] + list(moved.values())
    return with_kernels(replace(program, outputs=outputs), kept)
