"""The Metal backend's interface (compiler/backends.py): the GPU layer's passes (compiler/gpu/passes.py), without
CUDA's tensor cores, cuBLAS and arrival counters, and the MSL generator."""

from __future__ import annotations

from typing import Mapping

from luminal.compiler.gpu import passes as gpu
from luminal.compiler.gpu.gemv_order import bring_gemvs_together
from luminal.compiler.gpu.passes import fuse
from luminal.compiler.kernels import ir
from luminal.compiler.metal.program import launched_together, program_source, run_plan

__all__ = ["fuse", "passes", "variants", "program_source", "launched_together", "run_plan"]


def passes(
    kernels: ir.KernelProgram, donated: Mapping[str, str], target: str, activation_dtype: str
) -> ir.KernelProgram:
    """The shared GPU passes; then consecutive GEMVs are brought together to share a dispatch."""
    kernels = gpu.store_activations(gpu.read_in_place(kernels, donated, target), activation_dtype)
    return bring_gemvs_together(kernels)


def variants(name: str, kernels: ir.KernelProgram, target: str, gemm_library: str):
    """The candidate with and without its sibling GEMMs merged, as it will ship (Metal's GEMMs are SIMT kernels:
    no library to offer)."""
    return gpu.ranked_variants(name, kernels)
