"""Which GEMMs may run on tensor cores: those whose operands are half-precision values widened to float32.

A half-type matmul multiplies in float32 (luminal/hl/linalg.py widens both operands), and fusion never fuses
into a GEMM's operands, so a bf16 model's GEMM reads float32 buffers written by cast kernels. Such a value is
exactly representable in the half type it came from, so staging it back into that type loses nothing, and a
tensor core's products of two half values are exact in float32 as the SIMT kernel's are: only the order of the
float32 sums differs. An operand qualifies when its expression is (through guards, whose zero is exact too)
a cast to float32 of a half value, or a load of a buffer whose producer's body qualifies. Both operands must
come from the same half type (one `mma` multiplies one type).
"""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_plan import GemmPlan
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.half_activations import HALVES
from luminal.view import dims_product

# A tensor-core tile is 64 x 64 outputs; a GEMM with fewer rows or columns at its largest dims (a decode step's
# single row) stays on the SIMT kernel, which wastes less of a tile.
MIN_ROWS = 64
MIN_COLS = 64


def producers(p: ir.KernelProgram) -> dict[str, ir.LoopKernel]:
    """The loop kernel that writes each buffer (scatters aside)."""
    return {k.out: k for k in p.kernels if isinstance(k, ir.LoopKernel)}


def half_source(v: ir.Value, written: dict[str, ir.LoopKernel], depth: int = 0) -> dt.DType | None:
    """The half type every value of `v` is exactly representable in, or None when not known to be."""
    if depth > 16:  # a chain of copies this long is not worth following
        return None
    if isinstance(v, ir.Guard):
        return half_source(v.value, written, depth + 1)
    if isinstance(v, ir.Apply) and v.op == "Cast" and v.dtype == dt.float32 and v.args[0].dtype in HALVES:
        return v.args[0].dtype
    if isinstance(v, ir.Load) and v.dtype == dt.float32 and v.buffer in written:
        return half_source(written[v.buffer].body, written, depth + 1)
    return None


def tensor_core_type(p: ir.KernelProgram, k: ir.LoopKernel, gemm: GemmPlan) -> dt.DType | None:
    """The half type the GEMM's operands are staged in for `mma`, or None when it runs on the SIMT kernel."""
    m, n = (dims_product([k.shape[j] for j in axes]) for axes in (gemm.m, gemm.n))
    if m.hi < MIN_ROWS or n.hi < MIN_COLS:
        return None
    written = producers(p)
    a, b = half_source(gemm.contract.a, written), half_source(gemm.contract.b, written)
    return a if a is not None and a == b else None
