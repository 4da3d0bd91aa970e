"""A quantized matmul's zero-point subtraction computed where the integer GEMM packs its operands.

MatMulInteger lowers to an int32 contraction of two element-wise kernels, cast(a) - cast(a_zero) and
cast(b) - cast(b_zero), each written out as an int32 copy of its operand. The general fusion never inlines
into a contraction's operand (compiler/fusion/fuse.py: a fused operand is recomputed per output column by the loop
form), but the integer GEMM (compiler/cpu/int_gemm.py) evaluates its operands exactly once, while packing, and can
only prove that they fit int16 when it sees the casts. So here each such producer is inlined into the
operand, and kept that way only where the result is an integer GEMM; the int32 copies leave the program.
A producer that cannot be inlined (a previous GEMM whose epilogue requantizes and centres: QLinearMatMul after
QLinearConv) but whose values provably fit int16 is read through an int16 cast, which changes no value and
carries the proof to the GEMM.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.analysis import int_gemm_plan
from luminal.compiler.analysis.gemm_plan import roles
from luminal.compiler.cpu.fuse_dequant import inline_into_operand, replace_contract
from luminal.compiler.fusion.fuse import readers_of, with_kernels
from luminal.compiler.fusion.limits import within_limits
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.int_ranges import value_range


def _narrowed(kernel: ir.LoopKernel, side: str, producer: ir.Kernel) -> ir.LoopKernel:
    """`kernel` reading its GEMM's operand `side` through cast(cast(x, int16), int32) where the producer's values
    fit int16 (the casts then change nothing), else `kernel`."""
    found = value_range(producer.body) if isinstance(producer, ir.LoopKernel) else None
    if found is None or not int_gemm_plan.INT16[0] <= found[0] <= found[1] <= int_gemm_plan.INT16[1]:
        return kernel
    c = roles(kernel).contract
    narrow = ir.Apply("Cast", (ir.Apply("Cast", (getattr(c, side),), dt.int16),), dt.int32)
    return replace(kernel, body=replace_contract(kernel.body, c, replace(c, **{side: narrow})))


def fuse_integer_operands(program: ir.KernelProgram) -> ir.KernelProgram:
    """Every int32 contraction's element-wise operand producers (read by it alone) inlined into it, or their
    int16 range cast into its operand, where that makes it an integer GEMM."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel | None] = list(program.kernels)
    writer = {kernel.out: k for k, kernel in enumerate(program.kernels)}
    readers = readers_of(program)
    for k, consumer in enumerate(program.kernels):
        found = roles(consumer)
        if found is None or found.contract.dtype != dt.int32 or int_gemm_plan.plan(consumer) is not None:
            continue
        fused, removed = consumer, []
        for side in ("a", "b"):
            operand = getattr(roles(fused).contract, side)
            j = writer.get(operand.buffer) if isinstance(operand, ir.Load) else None
            if j is None:
                continue
            producer = program.kernels[j]
            alone = operand.buffer not in outputs and readers.get(operand.buffer) == [k] and ir.element_wise(producer)
            candidate = inline_into_operand(fused, producer, side, roles(fused)) if alone else None
            if candidate is not None and within_limits(candidate):
                fused, removed = candidate, [*removed, j]
            else:
                fused = _narrowed(fused, side, producer)
        if fused is not consumer and int_gemm_plan.plan(fused) is not None:
            kernels[k] = fused
            for j in removed:
                kernels[j] = None
    return with_kernels(program, [kernel for kernel in kernels if kernel is not None])
