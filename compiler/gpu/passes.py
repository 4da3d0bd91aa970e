"""The passes the CUDA and Metal backends share, as steps each backend's backend.py runs in order, with its own
passes between them, and the variants of each candidate they rank (`ranked_variants`): nothing rewrites the chosen
program after the ranking."""

from __future__ import annotations

from typing import Mapping

from luminal.compiler.analysis.attention_plan import add_partials_buffers
from luminal.compiler.analysis.targets import get_target
from luminal.compiler.fusion.fuse import fuse_single_consumers
from luminal.compiler.fusion.fuse_index import inline_index_functions
from luminal.compiler.fusion.fuse_residual import store_residuals
from luminal.compiler.gpu import attention_layout
from luminal.compiler.gpu.attention_reads import attend_through_concatenations
from luminal.compiler.gpu.copy_order import copies_beside_partners
from luminal.compiler.gpu.norm_prologue import fuse_norms_into_gemvs
from luminal.compiler.gpu.program import own_launches
from luminal.compiler.gpu.sibling_gemms import merge_sibling_gemms
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.derived_weights import derive_at_load
from luminal.compiler.kernels.half_activations import check_mode, store_half_activations
from luminal.compiler.kernels.in_place import scatter_in_place
from luminal.compiler.kernels.stored_values import read_stored_values


def fuse(kernels: ir.KernelProgram, target: str) -> ir.KernelProgram:
    """A LayerNorm's statistics fuse into its application, and a launch or a dispatch costs more than recomputing
    a few sines where they are read; residual sums are stored by the GEMVs that make them, so a norm reads one
    vector, and each norm goes into the prologues of the GEMVs that read it (one launch fewer per norm)."""
    # Fusion runs again only where a reader changed: over the same kernels it is the same pass again (more than
    # half of a small program's compile, fusing nothing).
    reading = read_stored_values(kernels)
    if reading.kernels != kernels.kernels:
        kernels = fuse_single_consumers(reading, get_target(target))
    kernels = inline_index_functions(kernels, get_target(target))
    return fuse_norms_into_gemvs(store_residuals(kernels))


def read_in_place(kernels: ir.KernelProgram, donated: Mapping[str, str], target: str) -> ir.KernelProgram:
    """An attention reads a paged KV cache through its block table (no concatenation kernel), then the pools'
    scatters write in place (each runtime binds a donated device array or MTLBuffer in place)."""
    return scatter_in_place(attend_through_concatenations(kernels, get_target(target)), donated)


def store_activations(kernels: ir.KernelProgram, activation_dtype: str) -> ir.KernelProgram:
    """Activations that hold half values stored in their half type (compiler/kernels/half_activations.py), an
    attention's output in its reader's layout (no transposing copy after a prefill's attention), and flash
    decoding's scratch."""
    if check_mode(activation_dtype) == "auto":
        kernels = store_half_activations(kernels)
    return add_partials_buffers(attention_layout.store_attentions_in_reader_layout(kernels))


def ranked_variants(name: str, kernels: ir.KernelProgram, kernel_launches=own_launches) -> list:
    """(name, program) of each way to ship `kernels` that the ranking chooses between: as it is and, where it has
    sibling GEMMs, with each group one GEMM over side-by-side weights (`+siblings`, compiler/gpu/sibling_gemms.py):
    a launch each group saves, against a buffer made at load. `kernel_launches(k, p)` is the backend's launch
    planner."""
    merged = merge_sibling_gemms(kernels, kernel_launches)
    found = [(name, kernels)] if merged is kernels else [(name, kernels), (f"{name}+siblings", merged)]
    return [(n, _as_shipped(p, kernel_launches)) for n, p in found]


def _as_shipped(kernels: ir.KernelProgram, kernel_launches) -> ir.KernelProgram:
    """A copy into an output moved up beside a thread kernel it can share a launch with, and what the program
    computes from weights alone (side-by-side weights too) marked to run once, at load: the last steps of every
    variant, so the cost model and profiling see the launches and the load work the program will have."""
    return derive_at_load(copies_beside_partners(kernels, kernel_launches))
