"""Weights converted element by element (a bf16 or f16 weight widened to float32, maybe transposed) inside the
GEMM that reads them as B, so the conversion is done once, when its panels are packed at load.

The general fusion never inlines into a GEMM operand (compiler/fusion/fuse.py: a fused producer would be
recomputed per tile), so a bf16 linear layer's weight was widened by a kernel of its own on every run: in one
layer of bench/encoder_kernels.py --bf16 those copies took 42% of the kernels' time (one Zen 4 thread, 1x32). A
conversion that reads weights alone and whose readers all read it as B makes their B a function of weights alone
once inlined, which compiler/cpu/prepack.py packs once per loaded program; where B cannot be packed at load (N or K
bound at run time) the GEMM converts while it packs B on each run, once per element, as the separate kernel did,
without writing and reading back the float copy.
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.cpu.fuse_dequant import inline_into_operand
from luminal.compiler.fusion.fuse import readers_of, with_kernels
from luminal.compiler.fusion.limits import within_limits
from luminal.compiler.kernels import ir

WIDENED = (dt.bfloat16, dt.float16)  # the weight types a conversion widens to float32


def is_weight_conversion(kernel: ir.Kernel, buffers: dict[str, ir.Buffer]) -> bool:
    """Whether `kernel` writes float32 cast(w) element by element, w read from a bf16 or f16 weight."""
    if not isinstance(kernel, ir.LoopKernel) or kernel.body.dtype != dt.float32:
        return False
    body = kernel.body
    if not (isinstance(body, ir.Apply) and body.op == "Cast" and isinstance(body.args[0], ir.Load)):
        return False
    source = buffers[body.args[0].buffer]
    return source.role == "weight" and source.dtype in WIDENED


def fuse_weight_conversions(program: ir.KernelProgram) -> ir.KernelProgram:
    """Inline every weight conversion whose readers all read it as a GEMM's B into each of them (a weight that
    several layers share is packed by each, as a float32 weight read by several GEMMs is)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel | None] = list(program.kernels)
    readers = readers_of(program)
    for k, producer in enumerate(program.kernels):
        users = readers.get(producer.out, [])
        if producer.out in outputs or not users or not is_weight_conversion(producer, program.buffers):
            continue
        fused = [_reading_as_b(kernels[j], producer) for j in users]
        if all(f is not None for f in fused):
            for j, f in zip(users, fused):
                kernels[j] = f
            kernels[k] = None
    return with_kernels(program, [kernel for kernel in kernels if kernel is not None])


def _reading_as_b(consumer: ir.Kernel | None, producer: ir.LoopKernel) -> ir.LoopKernel | None:
    """`consumer` reading the conversion's body as its GEMM's B, or None where it reads it otherwise."""
    fused = inline_into_operand(consumer, producer) if isinstance(consumer, ir.LoopKernel) else None
    return fused if fused is not None and within_limits(fused) else None
