"""Which loop kernels are GEMVs (a few rows against a weight matrix: a decode step's linear layers), and which of
their operands streams through 16-byte loads: the backend-neutral plan the CUDA GEMV generator reads.

A kernel is a GEMV when its body holds one float sum over a contraction variable `r` (an `ir.Reduce` or an
`ir.Contract`), reached from the root through element-wise ops only, with no reduction inside it (but the row
statistics of its input vector: a norm fused into its prologue) or in the rest of the body (the epilogue: bias,
activation, residual, casts); and when that sum's body reads a "stream" operand, a load whose index holds the
kernel's last output axis (the N axis) and walks `r` with stride 1 (a contiguous row of a [N, K] weight, as
torch's linear layout stores it), besides another operand that also walks `r` (the input vector); a Q8_0
weight's block scales, which read the N axis and `r` // 32, are evaluated beside it. The stream
is read 16 bytes at a time when that is provably aligned: K known and a multiple of the vector width, and every
other term of its index a multiple of it too. Otherwise the plan keeps scalar loads (width 1), which the same
kernel runs. The stream stays an ordinary `ir.Load` of any dtype: a dequantising expression around it (int8
weights times a scale) is evaluated as it is, element by element.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_plan import Accumulated
from luminal.compiler.kernels import hoist, ir
from luminal.compiler.kernels.affine import affine
from luminal.compiler.kernels.hoist import depends_on
from luminal.symbolic import Expr
from luminal.view import dims_product

VECTOR_BYTES = 16
# A float32 Contract (which the tiled GEMM would take) is a GEMV only up to this many rows: beyond it the tiles
# reuse each weight element across rows, which the GEMV does not.
SMALL_M = 8


@dataclass(frozen=True)
class GemvPlan:
    reduction: ir.Reduce  # the contraction as a sum over its variable (a Contract as the Reduce it stands for)
    epilogue: ir.Value  # the kernel body with the reduction replaced by `Accumulated`
    stream: ir.Load  # the operand read along the contraction with vector loads (when width > 1)
    width: int  # elements per load: 16 bytes' worth, or 1 where alignment is not proven
    # The factor of the sum's body that the stream multiplies and that does not read the last output axis (the
    # input vector, or what a fused producer makes of it): a code generator may compute it once per block.
    vector: ir.Value | None = None
    # Whether the vector reads row statistics (a norm's sum of squares, fused into the GEMV's prologue): sums
    # that read neither the contraction nor the last output axis. A code generator must compute the vector
    # once per block with those sums hoisted; evaluated per element, they would run K times per output.
    statistics: bool = False


def _top_sums(v: ir.Value) -> set[ir.Value]:
    """The reductions reached from `v` through element-wise ops only. Each node object is visited once: a
    chain of ops that read their operand twice (an integer division's correction steps) is a small DAG but an
    exponential tree."""
    if not ir.holds(v, ir.Reduce, ir.Contract):
        return set()
    return {n for n in ir.distinct(v, _operands) if isinstance(n, (ir.Reduce, ir.Contract))}


def _operands(v: ir.Value) -> list[ir.Value]:
    """An element-wise op's operands that hold a reduction: the rest have none to find (most bodies hold none)."""
    return [a for a in v.args if ir.holds(a, ir.Reduce, ir.Contract)] if isinstance(v, ir.Apply) else []


def _replace(v: ir.Value, old: ir.Value, new: ir.Value) -> ir.Value:
    if v == old:
        return new
    if isinstance(v, ir.Apply):
        return replace(v, args=tuple(_replace(a, old, new) for a in v.args))
    return v


def _has_reduction(v: ir.Value) -> bool:
    return any(isinstance(n, (ir.Reduce, ir.Contract, ir.Attend)) for n in ir.distinct(v))


def _loads_along(body: ir.Value, var: str) -> list[ir.Load]:
    return list(dict.fromkeys(n for n in ir.distinct(body) if isinstance(n, ir.Load) and var in n.index.symbols()))


def _width(stream: ir.Load, var: str, extent: Expr, outputs: list[str]) -> int:
    """Elements per 16-byte load of `stream` along `var`, or 1 where that alignment is not proven."""
    if stream.dtype not in (dt.bfloat16, dt.float16, dt.float32, dt.int8):  # int8: Q8_0 weights, 16 per load
        return 1
    width = VECTOR_BYTES // stream.dtype.itemsize
    if not extent.is_const or extent.value % width:
        return 1
    found = affine(stream.index, [*outputs, var])
    if found is None:
        return 1
    offset, coefficients = found
    terms = [offset, *(c for name, c in coefficients.items() if name != var)]
    return width if all(t.is_const and t.value % width == 0 for t in terms) else 1


def plan(kernel: ir.Kernel) -> GemvPlan | None:
    """How `kernel` runs as a GEMV, or None when it is not one."""
    return ir.kept(kernel, "gemv_plan", _plan)


def _plan(kernel: ir.Kernel) -> GemvPlan | None:
    if not isinstance(kernel, ir.LoopKernel) or not kernel.shape or isinstance(kernel.body, ir.Attend):
        return None
    sums = _top_sums(kernel.body)
    if len(sums) != 1:
        return None
    (found,) = sums
    reduction = found.as_reduce() if isinstance(found, ir.Contract) else found
    if reduction.op != "sum" or not reduction.dtype.is_float:
        return None
    epilogue = _replace(kernel.body, found, Accumulated(found.dtype))
    if _has_reduction(epilogue):
        return None
    outputs = [f"_i{j}" for j in range(len(kernel.shape))]
    last, var = outputs[-1], reduction.var
    loads = _loads_along(reduction.body, var)
    streams = [x for x in loads if last in x.index.symbols()]
    if len(streams) > 1:  # a Q8_0 weight's block scales walk the contraction too, a step per 32: not the stream
        streams = [x for x in streams if _contiguous(x, outputs, var)]
    if len(streams) != 1 or len(loads) < 2:
        return None  # no weight row, or nothing it multiplies (a row's own sum)
    stream = streams[0]
    vector = _vector(reduction.body, stream, last)
    statistics = _statistics(vector, var, reduction.extent, last) if vector is not None else []
    if _has_reduction(hoist.substitute(reduction.body, {s: hoist.Hoisted("", s.dtype) for s in statistics})):
        return None
    if not _contiguous(stream, outputs, var):
        return None  # not contiguous along the contraction: the tiled or warp kernels read it no worse
    if isinstance(found, ir.Contract):
        rows = [kernel.shape[j] for j, name in enumerate(outputs) if name not in stream.index.symbols()]
        m = dims_product(rows)
        if not m.is_const or m.value > SMALL_M:
            return None
    width = _width(stream, var, reduction.extent, outputs)
    return GemvPlan(reduction, epilogue, stream, width, vector, bool(statistics))


def _contiguous(load: ir.Load, outputs: list[str], var: str) -> bool:
    """Whether `load` walks the contraction variable `var` with stride 1 (an affine index)."""
    found = affine(load.index, [*outputs, var])
    return found is not None and found[1][var].is_const and found[1][var].value == 1


def _statistics(vector: ir.Value, var: str, extent: Expr, last: str) -> list[ir.Reduce]:
    """The sums in `vector` that read neither the contraction variable nor the last output axis."""
    found = hoist.invariant_reductions(vector, var, extent)
    return [s for s in found if not depends_on(s, last)]


def _vector(body: ir.Value, stream: ir.Load, last: str) -> ir.Value | None:
    """The factor of `body` (a product) that holds neither the stream nor the last output axis, if any."""
    if not isinstance(body, ir.Apply) or body.op != "Mul":
        return None
    for factor in body.args:
        if stream not in ir.distinct(factor) and not depends_on(factor, last):
            return factor
    return None
