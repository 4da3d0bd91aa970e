"""Q8_0 weights dequantised inside the GEMM that reads them, never written out as floats.

A quantised projection's weight is `cast(q int8) * scale` (luminal/quantize.py), an element-wise kernel over
two weights whose one reader is a GEMM's B operand. The general fusion never inlines into a GEMM operand
(compiler/fusion/fuse.py: a packed operand is read once per tile, a fused one would be recomputed per column), so
left alone this kernel writes a float copy of the weight on every run. Here it is inlined into the operand,
where the Q8_0 GEMM generator (compiler/cpu/codegen_qgemm.py) reads q and the scales directly; the float buffer
disappears from the program and its memory plan.

A Q8_0 activation (quantize="w8a8": the input rows of a projection quantised in the graph) is the same product,
cast(int8 value) * scale, computed from the rows rather than read from weights. Where every reader is such a
GEMM's A operand, it is inlined into each of them (the query, key and value projections read one), where the
int8 x int8 kernel (compiler/cpu/codegen_w8a8.py) evaluates it once per row into int8 rows and block scales.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_plan import GemmPlan, plan
from luminal.compiler.cpu import codegen_qgemm, codegen_w8a8
from luminal.compiler.fusion.fuse import inline, may_inline, readers_of, substitute_indices, unflatten, with_kernels
from luminal.compiler.fusion.limits import within_limits
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.bounded_index import fold_value
from luminal.compiler.kernels.fold_indices import fewer_divisions
from luminal.compiler.kernels.settle import settle
from luminal.symbolic import as_expr


def is_dequantisation(kernel: ir.Kernel, buffers: dict[str, ir.Buffer]) -> bool:
    """Whether `kernel` computes cast(int8 weight) times a float32 weight, element by element."""
    if not is_int8_product(kernel):
        return False
    cast, scale = sorted(kernel.body.args, key=lambda a: not _int8_cast(a))
    loads = (cast.args[0], scale)
    return all(isinstance(v, ir.Load) and buffers[v.buffer].role == "weight" for v in loads)


def is_int8_product(kernel: ir.Kernel) -> bool:
    """Whether `kernel` computes cast(an int8 value) times a float32 value, element by element."""
    if not isinstance(kernel, ir.LoopKernel) or kernel.body.dtype != dt.float32:
        return False
    body = kernel.body
    if not (isinstance(body, ir.Apply) and body.op == "Mul" and len(body.args) == 2):
        return False
    return sum(map(_int8_cast, body.args)) == 1 and all(a.dtype == dt.float32 for a in body.args)


def _int8_cast(v: ir.Value) -> bool:
    return isinstance(v, ir.Apply) and v.op == "Cast" and v.args[0].dtype == dt.int8


def inline_into_operand(
    consumer: ir.LoopKernel, producer: ir.LoopKernel, side: str = "b", gemm: GemmPlan | None = None
) -> ir.LoopKernel | None:
    """`consumer` with its GEMM's operand `side` ("a" or "b"; `gemm`: its plan, by default the float GEMM's)
    reading the producer's body instead of its buffer, or None when the producer's buffer is read anywhere else
    in the consumer (the other operand, the epilogue) or the operand is not a plain load of it."""
    gemm = plan(consumer) if gemm is None else gemm
    if gemm is None:
        return None
    c = gemm.contract
    operand, other = (c.a, c.b) if side == "a" else (c.b, c.a)
    if not (isinstance(operand, ir.Load) and operand.buffer == producer.out):
        return None
    if any(isinstance(n, ir.Load) and n.buffer == producer.out for n in (*ir.walk(other), *ir.walk(gemm.epilogue))):
        return None
    extents = {f"_i{k}": as_expr(d) for k, d in enumerate(consumer.shape)} | {c.var: c.extent}
    fused = substitute_indices(producer.body, unflatten(operand.index, producer.shape, extents))
    # Rows under two sizes (a prefill's batch and sequence) unflatten to `(256*_i1 + _r0) // (256*seq)`, 0 only
    # because _i1 < seq, which the simplifier cannot see (compiler/kernels/bounded_index.py): left, the block
    # scale's index would read the contraction's lane, and the int8 x int8 kernel would refuse the operand.
    fused = settle(fold_value(fused, extents, fewer_divisions))
    return replace(consumer, body=replace_contract(consumer.body, c, replace(c, **{side: fused})))


def replace_contract(v: ir.Value, old: ir.Contract, new: ir.Contract) -> ir.Value:
    if v == old:
        return new
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(replace_contract(a, old, new) for a in v.args))
    if isinstance(v, ir.Guard):
        return replace(v, value=replace_contract(v.value, old, new))
    if isinstance(v, ir.Reduce):
        return replace(v, body=replace_contract(v.body, old, new))
    return v


def fuse_quantised_activations(program: ir.KernelProgram) -> ir.KernelProgram:
    """Inline every Q8_0 activation whose readers are all Q8_0 GEMMs reading it as A into each of them, where
    that makes each an int8 x int8 GEMM (after the weights' dequantisations are inlined)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel | None] = list(program.kernels)
    readers = readers_of(program)
    for k, producer in enumerate(program.kernels):
        users = readers.get(producer.out, [])
        if producer.out in outputs or not users or not is_int8_product(producer):
            continue
        fused = [_int8_gemm(kernels[j], producer, program.buffers) for j in users]
        if all(f is not None for f in fused):
            for j, f in zip(users, fused):
                kernels[j] = f
            kernels[k] = None
    return with_kernels(program, [kernel for kernel in kernels if kernel is not None])


def _int8_gemm(consumer: ir.Kernel | None, producer: ir.LoopKernel, buffers) -> ir.LoopKernel | None:
    """`consumer` reading the activation `producer` as its A operand, when both operands are then Q8_0."""
    gemm = plan(consumer) if isinstance(consumer, ir.LoopKernel) else None
    if gemm is None or codegen_qgemm.q8_operand(consumer, gemm, buffers) is None:
        return None
    fused = inline_into_operand(consumer, producer, "a", gemm)
    if fused is None or not within_limits(fused):
        return None
    found = plan(fused)
    return fused if found is not None and codegen_w8a8.q8_rows(found) is not None else None


def fuse_dequantised_weights(program: ir.KernelProgram) -> ir.KernelProgram:
    """Inline every dequantisation into its only reader: into the B operand of a GEMM, or where a plain loop
    kernel reads it (a candidate that computes the projection as a reduction); then the Q8_0 activations into
    the A operands of those GEMMs (fuse_quantised_activations)."""
    outputs = {buf for buf, _ in program.outputs.values()}
    kernels: list[ir.Kernel | None] = list(program.kernels)
    readers = readers_of(program)
    names = itertools.count(2000)  # fresh reduction variables, apart from lowering's and fuse.py's
    for k, producer in enumerate(program.kernels):
        if producer.out in outputs or not is_dequantisation(producer, program.buffers):
            continue
        users = readers.get(producer.out, [])
        if len(users) != 1 or not isinstance(kernels[users[0]], ir.LoopKernel):
            continue
        consumer = kernels[users[0]]
        fused = inline_into_operand(consumer, producer)
        if fused is None and may_inline(producer, consumer):
            # Read as a plain reduction (a candidate without GEMMs): the cast and multiply are recomputed per
            # read, which costs less than writing and reading back a float copy of the weight.
            fused = inline(producer, consumer, names)
            fused = fused if within_limits(fused) else None
        if fused is not None:
            kernels[users[0]], kernels[k] = fused, None
    return fuse_quantised_activations(with_kernels(program, [kernel for kernel in kernels if kernel is not None]))
