"""Weight operands of GEMMs packed once, when a program is loaded, instead of on every run.

A GEMM kernel packs both operands into micro-kernel panels before it multiplies (compiler/cpu/codegen_gemm.py).
When operand B is a function of weights alone (the weight matrix of a linear layer, through any view), its
packed panels never change between runs, so the program gets a buffer of role `packed` for them (its label
names the kernel) that the runtime allocates once per loaded program and fills by calling `lm_prepare`
after binding the weights; the kernel then reads B's panels from it. On a 128x384x1536 linear this removes
a copy of the whole weight per run, as large as the multiply's own memory traffic.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.cpu import codegen_gemm
from luminal.compiler.kernels import ir
from luminal.compiler.storage.run_plan import PACKED
from luminal.symbolic import const

ROLE = PACKED  # the role's name is the artifact's (compiler/storage/run_plan.py)
PANEL_COLUMNS = 32  # the widest B panel any micro-kernel uses (12x32 on AVX-512); narrower ones fit the same size


def packable(kernel: ir.Kernel, buffers: dict[str, ir.Buffer]) -> codegen_gemm.GemmPlan | None:
    """The GEMM plan of `kernel` when its B operand depends on weights and its own N indices only."""
    gemm = codegen_gemm.plan(kernel)
    if gemm is None:
        return None
    c = gemm.contract
    read = {n.buffer for n in ir.walk(c.b) if isinstance(n, (ir.Load, ir.GatherLoad))}
    if not read or any(buffers[name].role != "weight" for name in read):
        return None
    if any(buffers[name].dtype == dt.int8 for name in read):
        return None  # Q8_0: the GEMM reads the int8 values in place (compiler/cpu/codegen_qgemm.py), never as floats
    allowed = {f"_i{j}" for j in gemm.n} | {c.var}
    if not codegen_gemm.index_vars(c.b) <= allowed:
        return None  # reads a batch or M index, or a run-time symbol
    if c.extent.symbols() or any(kernel.shape[j].symbols() for j in gemm.n):
        return None  # K or N known only at run time: the buffer's size would be too
    return gemm


def packed_size(kernel: ir.LoopKernel, gemm: codegen_gemm.GemmPlan) -> int:
    """Floats of B's panels: K rows by N rounded up to whole panels."""
    n = 1
    for j in gemm.n:
        n *= int(kernel.shape[j].evaluate({}))
    k = int(gemm.contract.extent.evaluate({}))
    return -(-n // PANEL_COLUMNS) * PANEL_COLUMNS * k


def add_packed_buffers(program: ir.KernelProgram) -> ir.KernelProgram:
    """`program` with a packed buffer for every GEMM whose B operand can be packed once."""
    buffers = dict(program.buffers)
    for k in program.kernels:
        gemm = packable(k, program.buffers)
        if gemm is not None:
            name = f"{k.name}_packed_b"
            buffers[name] = ir.Buffer(name, dt.float32, const(packed_size(k, gemm)), ROLE, k.name)
    return replace(program, buffers=buffers)


def packed_buffer(kernel: ir.Kernel, buffers: dict[str, ir.Buffer]) -> str | None:
    """The packed buffer that holds `kernel`'s B panels, if the program has one. A packed buffer that does not
    fit its kernel (a hand-edited artifact) is an error, not something to read past the end of."""
    names = [b.name for b in buffers.values() if b.role == ROLE and b.label == kernel.name]
    if not names:
        return None
    gemm = packable(kernel, buffers)
    if len(names) > 1 or gemm is None or buffers[names[0]].size != const(packed_size(kernel, gemm)):
        raise ValueError(f"packed buffer {names[0]!r} does not hold the B operand of kernel {kernel.name!r}")
    return names[0]


def read_only_packed(program: ir.KernelProgram) -> set[str]:
    """The weight buffers `lm_run` never reads: every kernel that names one reads it only as the B operand of a
    GEMM whose panels `lm_prepare` packed, so once packed its float values are not needed again."""
    direct: set[str] = set()
    packed_reads: set[str] = set()
    for k in program.kernels:
        values = [k.body] if isinstance(k, ir.LoopKernel) else [k.dest, k.at, k.src]
        reads = [n.buffer for v in values for n in ir.walk(v) if isinstance(n, (ir.Load, ir.GatherLoad))]
        if packed_buffer(k, program.buffers) is not None:
            b = codegen_gemm.plan(k).contract.b
            in_b = [n.buffer for n in ir.walk(b) if isinstance(n, (ir.Load, ir.GatherLoad))]
            packed_reads |= set(in_b)
            for name in in_b:  # each read of B's, once: what is left is read elsewhere in the kernel
                reads.remove(name)
        direct |= set(reads)
    weights = set(program.weights.values())
    return (packed_reads & weights) - direct
