"""The code generator of each target kind: a kernel program's whole source for a target.

Every generator is the one C-like renderer (codegen_c.py's Emitter) in a dialect (compiler/renderer/dialects.py); the
kinds differ in how kernels map onto the machine: C loops over OpenMP threads for the CPU, grids of CUDA thread
blocks (compiler/cuda/) for NVIDIA GPUs, the same launches as Metal threadgroups (compiler/metal/) for Apple
GPUs. A loaded artifact's stored source is checked against this.
"""

from __future__ import annotations

from typing import Callable

from luminal.compiler.analysis.targets import get_target
from luminal.compiler.kernels import ir


def _c(kernels: ir.KernelProgram) -> str:
    from luminal.compiler.cpu import codegen_c

    slots = {name: k for k, name in enumerate(sorted(kernels.buffers))}
    return codegen_c.program_source(kernels, slots, sorted(kernels.symbols))


def _cuda(kernels: ir.KernelProgram) -> str:
    from luminal.compiler.cuda.program import program_source as cuda_source

    return cuda_source(kernels)


def _metal(kernels: ir.KernelProgram) -> str:
    from luminal.compiler.metal.program import program_source as metal_source

    return metal_source(kernels)


GENERATORS: dict[str, Callable[[ir.KernelProgram], str]] = {"cpu": _c, "cuda": _cuda, "metal": _metal}


def program_source(kernels: ir.KernelProgram, target: str) -> str:
    """The generated source of `kernels` for `target` (a target name)."""
    kind = get_target(target).kind
    if kind not in GENERATORS:
        raise ValueError(f"target {target!r}: no code generator for {kind} targets yet")
    return GENERATORS[kind](kernels)
