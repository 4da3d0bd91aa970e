"""Which kernels are integer GEMMs: an int32 sum of products whose centred operands are proven to fit int16, so
they can be packed as int16 pairs (the CPU's micro-kernel, compiler/cpu/int_gemm.py). An analysis, not the CPU
backend's: the cost model charges the packing of every candidate, on every target."""

from __future__ import annotations

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_plan import GemmPlan, roles
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.int_ranges import value_range

INT16 = (dt.int16.min, dt.int16.max)


def fits_int16(v: ir.Value) -> bool:
    found = value_range(v)
    return found is not None and INT16[0] <= found[0] and found[1] <= INT16[1]


def plan(kernel: ir.Kernel) -> GemmPlan | None:
    """How `kernel` runs as an integer GEMM, or None when it is not one."""
    found = roles(kernel)
    if found is None:
        return None
    c = found.contract
    if not (c.dtype == c.a.dtype == c.b.dtype == dt.int32 and fits_int16(c.a) and fits_int16(c.b)):
        return None
    return found
