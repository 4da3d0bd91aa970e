"""Which GEMM kernels may run as one cuBLAS call (cublasGemmStridedBatchedEx), and the call's arguments.

A GEMM kernel (compiler/analysis/gemm_plan.py) is eligible when it is nothing but the GEMM: its epilogue is the
accumulator itself, or its cast to the output's half type, and each operand is a plain strided matrix read in
place (a float32 load, or a widening cast of a half load: the half values are what cuBLAS multiplies). An
epilogue the generated kernels fuse (bias, activation, residual) makes the GEMM ineligible: cuBLAS would write
the product and a following kernel read it back, which costs the bytes fusion saved; those GEMMs stay generated.

cuBLAS is column-major. The output is row-major, so where its N axes are innermost the call computes C^T =
B^T A^T (cuBLAS's "A" is our B, its "B" our A), and where its M axes are, C = A B. An operand whose unit stride
runs along the other axis is passed transposed (CUBLAS_OP_T), so a [out, in] weight is read as it is stored.
Several M (N, batch) axes pass when they flatten to one strided axis.

A CUDA graph is captured at a shape bucket's dims (runtime/cuda/buckets.py) while the kernels read the live dims;
a library call computes at the dims it is issued with. So the contraction's length, the offsets, the batch
stride and each flattened axis's (innermost) stride must be free of symbols; outer M, N or batch axes may be
symbolic, as they flatten row-major: the live elements are the first ones of each flattened axis. Computing the
bucket's extra rows, columns or batches then reads and writes only the bucket-sized slots past the live ones,
and the live elements are exactly those of a call at the live dims.
"""

from __future__ import annotations

from dataclasses import replace

from luminal import dtypes as dt
from luminal.compiler.analysis import gemm_plan
from luminal.compiler.analysis.gemm_plan import Accumulated
from luminal.compiler.cuda.half_operands import HALVES
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.affine import affine
from luminal.compiler.storage.run_plan import LibraryGemm, Matrix  # the artifact's record of a call
from luminal.symbolic import Expr, as_expr
from luminal.view import ShapeTracker, dims_product

CUBLAS = "cublas"
LIBRARIES = (CUBLAS,)


def _operand(v: ir.Value) -> tuple[ir.Load, dt.DType] | None:
    """The load a GEMM operand reads in place, and the type cuBLAS reads it in; None when it is not one."""
    if isinstance(v, ir.Load) and v.dtype == dt.float32:
        return v, dt.float32
    if isinstance(v, ir.Apply) and v.op == "Cast" and v.dtype == dt.float32:
        inner = v.args[0]
        if isinstance(inner, ir.Load) and inner.dtype in HALVES:
            return inner, inner.dtype
    return None


def _constant(e: Expr) -> int | None:
    e = as_expr(e)
    return int(e.value) if e.is_const else None


def _flat_stride(coefficients: dict[int, Expr], axes: tuple[int, ...], shape) -> int | None:
    """The one stride of `axes` flattened row-major (0 for none), or None when they do not flatten to one axis
    of constant stride. Outer axes may have symbolic strides (a [batch, seq] pair of M axes): the rows of the
    live dims are then the first rows of the flattened axis, whatever the bucket. Axes of one element count not."""
    axes = tuple(j for j in axes if not (as_expr(shape[j]).is_const and int(as_expr(shape[j]).value) == 1))
    if not axes:
        return 0
    inner = _constant(coefficients[axes[-1]])
    if inner is None:
        return None
    expected = as_expr(inner)
    for j in reversed(axes):
        if as_expr(coefficients[j]) != expected:
            return None
        expected = expected * shape[j]
    return inner


def _strides(index: Expr, shape, groups: dict[str, tuple[int, ...]], k: str) -> dict[str, int] | None:
    """The constant stride of each group of output axes and of the contraction `k`, and "offset"; None when the
    index is not affine in them, or a stride or the offset depends on a symbol."""
    names = [f"_i{j}" for axes in groups.values() for j in axes] + ([k] if k else [])
    found = affine(index, names)
    if found is None:
        return None
    offset, coefficients = found
    by_axis = {int(name[2:]): c for name, c in coefficients.items() if name != k}
    out = {group: _flat_stride(by_axis, axes, shape) for group, axes in groups.items()}
    out["offset"] = _constant(offset)
    if k:
        out["k"] = _constant(coefficients[k])
    return None if any(v is None for v in out.values()) else out


def _matrix(buffer: str, dtype: dt.DType, strides: tuple[int, int], extents: tuple[int, int], batch_stride: int,
            offset: int) -> Matrix | None:  # fmt: skip
    """The column-major view of a matrix whose element (r, c) lies at r * strides[0] + c * strides[1], r and c
    below `extents`: unit stride along r (as stored) or along c (transposed); the leading dimension must cover
    the unit-stride axis (cuBLAS checks it), and an axis of one element may have any stride."""
    (sr, sc), (er, ec) = strides, extents
    if sr == 1 or er == 1:
        ld = sc if ec > 1 else er
        if ld >= er:
            return Matrix(buffer, dtype, False, ld, offset, batch_stride)
    if sc == 1 or ec == 1:
        ld = sr if er > 1 else ec
        if ld >= ec:
            return Matrix(buffer, dtype, True, ld, offset, batch_stride)
    return None


def gemm_call(p: ir.KernelProgram, k: ir.Kernel) -> LibraryGemm | None:
    """The cuBLAS call that computes kernel `k` of program `p`, or None when it is not eligible."""
    gemm = gemm_plan.plan(k)
    if gemm is None:
        return None
    c = gemm.contract
    operands = _operand(c.a), _operand(c.b)
    if None in operands or operands[0][1] != operands[1][1]:
        return None
    (a_load, in_type), (b_load, _) = operands
    out_type = p.buffers[k.out].dtype
    if gemm.epilogue == Accumulated(dt.float32):
        if out_type != dt.float32:
            return None
    elif gemm.epilogue != ir.Apply("Cast", (Accumulated(dt.float32),), out_type) or out_type != in_type:
        return None  # a fused epilogue: the generated kernel keeps it (see the module docstring)
    shape, length = k.shape, _constant(c.extent)
    m_extent, n_extent = dims_product([shape[j] for j in gemm.m]), dims_product([shape[j] for j in gemm.n])
    if length is None or length < 1 or m_extent.hi < 1 or n_extent.hi < 1:
        return None
    sa = _strides(a_load.index, shape, {"batch": gemm.batch, "m": gemm.m}, c.var)
    sb = _strides(b_load.index, shape, {"batch": gemm.batch, "n": gemm.n}, c.var)
    sc = _strides(ShapeTracker.contiguous(shape).index, shape, {"batch": gemm.batch, "m": gemm.m, "n": gemm.n}, "")
    if sa is None or sb is None or sc is None:
        return None
    m_hi, n_hi = int(m_extent.hi), int(n_extent.hi)
    if sc["n"] == 1 or n_hi == 1:  # N innermost in the output: C^T (n x m, column-major) = B^T A^T
        rows, cols, extents = n_extent, m_extent, (n_hi, m_hi)
        first = _matrix(b_load.buffer, in_type, (sb["n"], sb["k"]), (n_hi, length), sb["batch"], sb["offset"])
        second = _matrix(a_load.buffer, in_type, (sa["k"], sa["m"]), (length, m_hi), sa["batch"], sa["offset"])
        out = _matrix(k.out, out_type, (sc["n"], sc["m"]), extents, sc["batch"], sc["offset"])
    else:  # M innermost: C (m x n, column-major) = A B
        rows, cols, extents = m_extent, n_extent, (m_hi, n_hi)
        first = _matrix(a_load.buffer, in_type, (sa["m"], sa["k"]), (m_hi, length), sa["batch"], sa["offset"])
        second = _matrix(b_load.buffer, in_type, (sb["k"], sb["n"]), (length, n_hi), sb["batch"], sb["offset"])
        out = _matrix(k.out, out_type, (sc["m"], sc["n"]), extents, sc["batch"], sc["offset"])
    if first is None or second is None or out is None or out.transpose:
        return None
    return LibraryGemm(first, second, out, rows, cols, length, dims_product([shape[j] for j in gemm.batch]))


def mark(p: ir.KernelProgram, names: set[str]) -> ir.KernelProgram:
    """`p` with kernels `names` computed by cuBLAS (each must be eligible)."""
    return replace(p, library={**p.library, **{name: CUBLAS for name in sorted(names)}})


def eligible(p: ir.KernelProgram) -> list[ir.Kernel]:
    return [k for k in p.kernels if gemm_call(p, k) is not None]
