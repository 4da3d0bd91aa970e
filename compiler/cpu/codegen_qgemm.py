"""C for a GEMM/GEMV whose B operand is a Q8_0 weight: int8 values read in place, dequantised in registers.

After compiler/cpu/fuse_dequant.py, a quantised projection's GEMM has B = cast(q[n, k]) * scale[n, k / 32]
(luminal/quantize.py). The generic GEMM would pack B into float panels, a float copy of the weight, so here
nothing is packed: for each weight row n, each block of 32 int8 values is loaded, widened to float in vector
registers, multiplied with A's 32 floats of the same block, and the block's sum of products is added times the
block's scale into fp32 accumulators (the scale factored out of the block, as llama.cpp's Q8_0 dot product does).

Tasks are tiles of LM_QT weight rows (per batch element), run on the OpenMP team. Inside a tile, one row of B
at a time is dotted with QM rows of A (4 while 4 remain, then one at a time: one row is a decode step's GEMV),
so each int8 block is widened once for every A row and the A rows' accumulators are independent. One weight row
at a time keeps the weight read a single sequential stream, which the hardware prefetcher follows: dotting four
rows at once (four interleaved streams of 12 cache lines each at K = 768) read 5.7 G weights/s on one thread of
this project's AMD EPYC, one row at a time 16-18 (the int8 decode step: 10.2 -> 4.8 ms, bench/step_kernels.py
--quantize int8). The int8 x int8 kernel (codegen_w8a8.py) is the exception where 4 or more rows of A share the
weights: its register tiles take 4 weight rows, so the weight rows go outside A's row groups (each read from memory
once for all of them) and the next ones are prefetched in software. A is read in place when it is a strided matrix
(compiler/analysis/gemm_operands.py), else evaluated once into rows. The rest of the kernel body (bias, activation,
residual) runs on each dot product, as in the float GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_operands import decode, direct_rows, extent
from luminal.compiler.analysis.gemm_plan import GemmPlan, index_vars
from luminal.compiler.cpu import codegen_w8a8
from luminal.compiler.kernels import ir
from luminal.quantize import BLOCK
from luminal.symbolic import Expr, var

# Needs codegen_gemm.PRELUDE first (lm_vf, LM_VL, LM_VBYTES, the pack buffer).
PRELUDE = """
#define LM_QT 16 /* weight rows per task */
#define LM_QV (32 / LM_VL) /* vectors per Q8_0 block */
/* LM_VL int8 values widened to float. Intrinsics: GCC 12 turns __builtin_convertvector from int8 into one
   conversion per lane. */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline lm_vf lm_widen_q8(const int8_t* p) {
  return (lm_vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}
static inline float lm_hsum(lm_vf v) { return _mm512_reduce_add_ps((__m512)v); }
#elif defined(__AVX2__)
#include <immintrin.h>
static inline lm_vf lm_widen_q8(const int8_t* p) {
  return (lm_vf)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}
#endif
#if !defined(__AVX512F__)
static inline float lm_hsum(lm_vf v) {
  float h = 0;
  for (int l = 0; l < LM_VL; l++) h += v[l];
  return h;
}
#endif
#if !defined(__AVX512F__) && !defined(__AVX2__)
static inline lm_vf lm_widen_q8(const int8_t* p) {
  lm_vf r;
  for (int l = 0; l < LM_VL; l++) r[l] = (float)p[l];
  return r;
}
#endif
#pragma GCC push_options
#pragma GCC optimize("fp-contract=fast")
/* out[i] = sum over kb blocks b of s[b] * sum_j a[i][32 b + j] * q[32 b + j]: one weight row, QM rows of A. With
   several rows of A, the same row of the next tile (LM_QT rows on, where the rows follow each other) is prefetched:
   the first group of rows of A to read a tile waited on memory for it (16 rows, K = 768, one core of this project's
   Zen 5: 4.7 G weights/s, 5.3 with the prefetch, 5.5-5.7 from L2; 32 rows on: 5.0). */
#define LM_QDOT(NAME, QM)                                                                                 \\
  static inline void NAME(int64_t kb, const int8_t* restrict q, const float* restrict s,                  \\
                          const float* const* a, float* out) {                                            \\
    lm_vf acc[QM];                                                                                        \\
    _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) acc[i] = (lm_vf){0};                             \\
    for (int64_t b = 0; b < kb; b++) {                                                                    \\
      lm_vf w[LM_QV];                                                                                     \\
      _Pragma("GCC unroll 4") for (int v = 0; v < LM_QV; v++) w[v] = lm_widen_q8(q + 32 * b + v * LM_VL); \\
      const float sc = s[b];                                                                              \\
      if (QM > 1) __builtin_prefetch((const void*)((uintptr_t)(q + 32 * b) + LM_QT * 32 * kb));       \\
      _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) {                                              \\
        lm_vf av, t;                                                                                      \\
        memcpy(&av, a[i] + 32 * b, LM_VBYTES);                                                            \\
        t = av * w[0];                                                                                    \\
        _Pragma("GCC unroll 4") for (int v = 1; v < LM_QV; v++) {                                         \\
          memcpy(&av, a[i] + 32 * b + v * LM_VL, LM_VBYTES);                                              \\
          t += av * w[v];                                                                                 \\
        }                                                                                                 \\
        acc[i] += t * sc;                                                                                 \\
      }                                                                                                   \\
    }                                                                                                     \\
    _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) out[i] = lm_hsum(acc[i]);                        \\
  }
LM_QDOT(lm_qdot1, 1)
LM_QDOT(lm_qdot4, 4)
#pragma GCC pop_options
"""


@dataclass(frozen=True)
class Q8Operand:
    """B's element (n, k) is (float)q[q_row + k] * scale[scale_row + k / 32]; the rows use only N indices."""

    q: str
    q_row: Expr
    scale: str
    scale_row: Expr


def q8_operand(kernel: ir.LoopKernel, gemm: GemmPlan, buffers: dict[str, ir.Buffer]) -> Q8Operand | None:
    """How B reads a Q8_0 weight, or None when B is anything else (the float GEMM then handles it)."""
    c, b = gemm.contract, gemm.contract.b
    if not (isinstance(b, ir.Apply) and b.op == "Mul" and len(b.args) == 2 and b.dtype == dt.float32):
        return None
    casts = [a for a in b.args if isinstance(a, ir.Apply) and a.op == "Cast"]
    scales = [a for a in b.args if isinstance(a, ir.Load) and a.dtype == dt.float32]
    if len(casts) != 1 or len(scales) != 1 or not isinstance(casts[0].args[0], ir.Load):
        return None
    q, s = casts[0].args[0], scales[0]
    if q.dtype != dt.int8 or any(buffers[v.buffer].role != "weight" for v in (q, s)):
        return None
    if not c.extent.is_const or c.extent.value % BLOCK or any(kernel.shape[j].symbols() for j in gemm.n):
        return None
    k = var(c.var, 0, c.extent.value - 1)  # with its range, so k // 32 simplifies as the loads' indexes did
    q_row, s_row = q.index.substitute({c.var: 0}), s.index.substitute({c.var: 0})
    if q.index != q_row + k or s.index != s_row + k // BLOCK:
        return None  # not contiguous along the contraction in whole blocks
    if not (index_vars(b) - {c.var}) <= {f"_i{j}" for j in gemm.n} or (q_row.symbols() | s_row.symbols()) - {
        f"_i{j}" for j in gemm.n
    }:
        return None  # reads a batch or M index, or a run-time symbol
    return Q8Operand(q.buffer, q_row, s.buffer, s_row)


W8A8_PRELUDE = codegen_w8a8.PRELUDE  # after PRELUDE, where a kernel is int8 x int8


def int8_by_int8(kernel: ir.Kernel, gemm: GemmPlan, buffers: dict[str, ir.Buffer]) -> bool:
    """Whether `kernel` is a Q8_0 GEMM whose A is a Q8_0 activation (quantize="w8a8"): int8 x int8."""
    return q8_operand(kernel, gemm, buffers) is not None and codegen_w8a8.q8_rows(gemm) is not None


def rows_loop(shape, gemm: GemmPlan, batched: bool) -> list[str]:
    """The opening of a parallel loop over A's rows (lm_r: batch element * M + row), their indices declared."""
    lines = [
        "  #pragma omp parallel for schedule(static) reduction(|:lm_err) if (lm_nba * lm_M * lm_K >= 65536)",
        "  for (int64_t lm_r = 0; lm_r < lm_nba * lm_M; lm_r++) {",
        "    const int64_t lm_bt = lm_r / lm_M, lm_m = lm_r % lm_M; (void)lm_bt;",
    ]
    lines += ["    " + s for s in decode("lm_bt", shape, gemm.batch if batched else ())]
    return lines + ["    " + s for s in decode("lm_m", shape, gemm.m)]


def _pack_a(emitter_cls, ptrs, kernel: ir.LoopKernel, gemm: GemmPlan, batched: bool) -> list[str]:
    """A evaluated once into rows: lm_pa[(batch element * M + row) * K + k]."""
    c = gemm.contract
    e = emitter_cls(ptrs)
    e.indent = 0
    value = e.emit(c.a)
    lines = rows_loop(kernel.shape, gemm, batched)
    lines += [f"    for (int64_t {c.var} = 0; {c.var} < lm_K; {c.var}++) {{"]
    lines += ["      " + s.strip() for s in e.lines]
    return lines + [f"      lm_pa[lm_r * lm_K + {c.var}] = {value};", "    }", "  }"]


def _float_rows(emitter_cls, ptrs, kernel: ir.LoopKernel, gemm: GemmPlan, batched: bool) -> codegen_w8a8.RowsOfA:
    """A's float rows: read in place when A is a strided matrix, else evaluated once into lm_pa."""
    c = gemm.contract
    direct = direct_rows(c.a, c.var, gemm.m, kernel.shape)
    setup, declare = [], ["    const float* lm_arow[4];", "    int64_t lm_mstep = 4;"]
    if direct is not None:
        base = f"{ptrs[direct.buffer]} + ({direct.offset.render_c()})"
        declare += [f"    const float* lm_abase = {base}; const int64_t lm_lda = {direct.row_stride.render_c()};"]
    else:
        setup += ["  float* lm_pa = lm_gemm_pack_buffer(lm_nba * lm_M * lm_K + 1);", "  if (!lm_pa) return 1;"]
        setup += _pack_a(emitter_cls, ptrs, kernel, gemm, batched)
        declare += [f"    const float* lm_abase = lm_pa + {'lm_bt * lm_M * lm_K' if batched else '0'};"]
        declare += ["    const int64_t lm_lda = lm_K;"]
    point = "lm_arow[lm_i] = lm_abase + (lm_m0 + lm_i) * lm_lda;"
    args = "(lm_KB, lm_qrow[0], lm_srow[0], lm_arow, lm_dot);"
    return codegen_w8a8.RowsOfA(
        setup, declare, point, 1, [], [f"if (lm_mstep == 4) lm_qdot4{args}", f"else lm_qdot1{args}"]
    )


def _point_weight_rows(shape, gemm: GemmPlan, operand: Q8Operand, ptrs, first: str, q: str, s: str | None):
    """Statements pointing q[lm_w] (and s[lm_w]) at weight row `first` (a C expression of lm_w), lm_w < lm_nstep."""
    lines = ["  for (int64_t lm_w = 0; lm_w < lm_nstep; lm_w++) {", f"    const int64_t lm_n = {first};"]
    lines += ["    " + s for s in decode("lm_n", shape, gemm.n)]
    lines += [f"    {q}[lm_w] = {ptrs[operand.q]} + ({operand.q_row.render_c()});"]
    if s is not None:
        lines += [f"    {s}[lm_w] = {ptrs[operand.scale]} + ({operand.scale_row.render_c()});"]
    return lines + ["  }"]


def kernel_source(
    kernel: ir.LoopKernel, gemm: GemmPlan, operand: Q8Operand, emitter_cls, head: list[str], ptrs, out_store
) -> list[str]:
    """The body lines of a Q8_0 GEMM kernel (after `head`, the pointer and symbol declarations); int8 x int8 where
    A is a Q8_0 activation too (compiler/cpu/codegen_w8a8.py)."""
    c, shape = gemm.contract, kernel.shape
    a_batched = any(f"_i{j}" in index_vars(c.a) for j in gemm.batch)
    rows = codegen_w8a8.q8_rows(gemm)
    if rows is not None:
        pack = codegen_w8a8.pack_rows(emitter_cls, ptrs, rows, rows_loop(shape, gemm, a_batched))
        a = codegen_w8a8.rows_of_a(pack, a_batched)
    else:
        a = _float_rows(emitter_cls, ptrs, kernel, gemm, a_batched)
    lines = head + [
        "  int lm_err = 0;",
        f"  const int64_t lm_M = {extent(shape, gemm.m)}, lm_N = {extent(shape, gemm.n)};",
        f"  const int64_t lm_NB = {extent(shape, gemm.batch)}, lm_K = {c.extent.render_c()}, lm_KB = lm_K / 32;",
        "  if (lm_M <= 0 || lm_N <= 0 || lm_NB <= 0) return 0;",
        f"  const int64_t lm_nba = {'lm_NB' if a_batched else '1'}; (void)lm_nba;",
    ]
    lines += a.setup
    lines += [
        "  const int64_t lm_nt = (lm_N + LM_QT - 1) / LM_QT;",
        "  #pragma omp parallel for schedule(static) reduction(|:lm_err) if (lm_NB * lm_nt > 1 && "
        "lm_NB * lm_M * lm_N * lm_K >= 65536)",
        "  for (int64_t lm_t = 0; lm_t < lm_NB * lm_nt; lm_t++) {",
        "    const int64_t lm_bt = lm_t / lm_nt, lm_n0 = lm_t % lm_nt * LM_QT; (void)lm_bt;",
    ]
    lines += ["    " + s for s in decode("lm_bt", shape, gemm.batch)]
    lines += a.declare
    nr = a.weight_rows
    lines += [f"    const int8_t* lm_qrow[{nr}];", f"    const float* lm_srow[{nr}];"]
    lines += [f"    const int8_t* lm_qnext[{nr}];"] if nr > 1 else []
    lines += ["    float lm_dot[16];", "    const int64_t lm_nend = lm_n0 + LM_QT < lm_N ? lm_n0 + LM_QT : lm_N;"]
    rows_of_a = [
        "for (int64_t lm_m0 = 0; lm_m0 < lm_M; lm_m0 += lm_mstep) {",
        "  lm_mstep = lm_M - lm_m0 >= 4 ? 4 : 1;",
        f"  for (int64_t lm_i = 0; lm_i < lm_mstep; lm_i++) {a.point}",
    ]
    # Several weight rows at once only where at least 4 rows of A share them: a lone row reads its weights as one
    # sequential stream, which the hardware prefetcher follows (interleaved rows measured slower, see above).
    weight_rows = [
        "for (int64_t lm_nw = lm_n0, lm_nstep; lm_nw < lm_nend; lm_nw += lm_nstep) {",
        f"  lm_nstep = lm_M >= 4 && lm_nend - lm_nw >= {nr} ? {nr} : 1;",
        *_point_weight_rows(shape, gemm, operand, ptrs, "lm_nw + lm_w", "lm_qrow", "lm_srow"),
    ]
    if nr > 1:  # the next weight rows (clamped to the last), prefetched while these are dotted
        ahead = f"(lm_nw + lm_w + {nr} < lm_N ? lm_nw + lm_w + {nr} : lm_N - 1)"
        weight_rows += _point_weight_rows(shape, gemm, operand, ptrs, ahead, "lm_qnext", None)
    weight_rows += a.prepare
    # Weight rows outside when several share a tile: each is read from memory once, for all of A's rows at once.
    outer, inner = (weight_rows, rows_of_a) if nr > 1 else (rows_of_a, weight_rows)
    lines += ["    " + s for s in outer] + ["      " + s for s in inner]
    lines += ["        " + s for s in a.calls]
    # Epilogue: the rest of the body on each dot product of the block.
    e = emitter_cls(ptrs)
    e.indent = 6
    value = e.emit(gemm.epilogue)
    lines += [
        "        for (int64_t lm_w = 0; lm_w < lm_nstep; lm_w++) {",
        "          const int64_t lm_n = lm_nw + lm_w;",
    ]
    lines += ["          " + s for s in decode("lm_n", shape, gemm.n)]
    lines += ["          for (int64_t lm_i = 0; lm_i < lm_mstep; lm_i++) {"]
    lines += ["            const int64_t lm_m = lm_m0 + lm_i;"]
    lines += ["            " + s for s in decode("lm_m", shape, gemm.m)]
    lines += ["            const float lm_acc = lm_dot[4 * lm_w + lm_i];"]
    lines += ["      " + s for s in e.lines]
    lines += ["            " + out_store(value), "          }", "        }", "      }", "    }", "  }"]
    return lines + ["  return lm_err;", "}"]
