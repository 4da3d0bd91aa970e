"""The CUDA backend's interface (compiler/backends.py): the GPU layer's passes (compiler/gpu/passes.py) with
CUDA's own between them (tensor cores' half operands, flash decoding's arrival counters), cuBLAS variants, and
the CUDA C++ generator."""

from __future__ import annotations

from typing import Mapping

from luminal.compiler.cuda.arrivals import add_arrival_counters
from luminal.compiler.cuda.gemm_choice import check_mode, library_variant
from luminal.compiler.cuda.program import kernel_launches, launched_together, program_source, run_plan
from luminal.compiler.cuda.read_past_casts import read_past_casts
from luminal.compiler.gpu import passes as gpu
from luminal.compiler.gpu.gemv_order import bring_gemvs_together
from luminal.compiler.gpu.passes import fuse
from luminal.compiler.kernels import ir

__all__ = ["fuse", "passes", "variants", "program_source", "launched_together", "run_plan"]


def passes(
    kernels: ir.KernelProgram, donated: Mapping[str, str], target: str, activation_dtype: str
) -> ir.KernelProgram:
    """Tensor-core GEMMs read half operands at their source (compiler/cuda/read_past_casts.py); a flash-decoding
    attention runs in one launch (arrival counters: compiler/cuda/arrivals.py); then consecutive GEMVs are
    brought together to share a launch (compiler/gpu/gemv_batch.py)."""
    kernels = read_past_casts(gpu.read_in_place(kernels, donated, target))
    kernels = gpu.store_activations(kernels, activation_dtype)
    return bring_gemvs_together(add_arrival_counters(kernels))


def variants(name: str, kernels: ir.KernelProgram, target: str, gemm_library: str):
    """The candidate as generated and with GEMMs given to cuBLAS (compiler/cuda/gemm_choice.py): both with
    "auto", the library one alone with "always"; each with and without its sibling GEMMs merged, as it will ship
    (compiler/gpu/passes.py's `ranked_variants`, planned by CUDA's launches: tensor cores, cuBLAS, flash decoding)."""
    library = library_variant(kernels, target, check_mode(gemm_library))
    found = [(name, kernels)] if library is None else [(name, kernels), (f"{name}+cublas", library)]
    if library is not None and gemm_library == "always":
        found = found[1:]
    return [shipped for n, k in found for shipped in gpu.ranked_variants(n, k, kernel_launches)]
