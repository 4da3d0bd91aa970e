"""The CPU backend's interface (compiler/backends.py): C over OpenMP threads."""

from __future__ import annotations

from typing import Mapping

from luminal.compiler.analysis.targets import get_target
from luminal.compiler.cpu import codegen_c
from luminal.compiler.cpu.fuse_dequant import fuse_dequantised_weights
from luminal.compiler.cpu.fuse_int_operands import fuse_integer_operands
from luminal.compiler.cpu.fuse_weight_conversions import fuse_weight_conversions
from luminal.compiler.cpu.prepack import add_packed_buffers, read_only_packed
from luminal.compiler.fusion.fuse_index import inline_index_functions
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.in_place import scatter_in_place, written_inputs
from luminal.compiler.storage.run_plan import RunPlan


def fuse(kernels: ir.KernelProgram, target: str) -> ir.KernelProgram:
    """Besides the single-consumer policy's fusion, a position computed from indices and read-only inputs is
    computed where it is read: a multi-LoRA gather's `slot * stride + offset` then stays visible to the C
    generator, which reads the stack's row in place (compiler/cpu/row_sums.py), instead of loading a stored
    position per element (one stored kernel every projection of a shape shares)."""
    return inline_index_functions(kernels, get_target(target), integer_only=True)


def passes(
    kernels: ir.KernelProgram, donated: Mapping[str, str], target: str, activation_dtype: str
) -> ir.KernelProgram:
    """Scatters write their donated inputs in place; Q8_0 weights are dequantised in the GEMM's loads
    (compiler/cpu/fuse_dequant.py), never packed as floats, and a quantized matmul's zero points are subtracted
    where the integer GEMM packs (compiler/cpu/fuse_int_operands.py), a bf16 or f16 weight is widened where its
    GEMM packs it (compiler/cpu/fuse_weight_conversions.py); then weight panels are packed at load."""
    kernels = fuse_integer_operands(fuse_dequantised_weights(scatter_in_place(kernels, donated)))
    kernels = fuse_weight_conversions(kernels)
    return add_packed_buffers(kernels)


def variants(name: str, kernels: ir.KernelProgram, target: str, gemm_library: str):
    return [(name, kernels)]  # no library GEMMs to offer


def program_source(kernels: ir.KernelProgram) -> str:
    slots = {name: k for k, name in enumerate(sorted(kernels.buffers))}
    return codegen_c.program_source(kernels, slots, sorted(kernels.symbols))


def launched_together(kernels: ir.KernelProgram) -> list[tuple[str, ...]]:
    return []  # every kernel is its own call


def run_plan(kernels: ir.KernelProgram) -> RunPlan:
    """No launches (`lm_run` is one call): the donated inputs written in place, and the weights the runtime may
    let go once their panels are packed."""
    return RunPlan(written_inputs=written_inputs(kernels), packed_only=tuple(sorted(read_only_packed(kernels))))
