"""C for a Q8_0 GEMM whose A operand is a Q8_0 activation too (quantize="w8a8", luminal/quantize.py): int8 x int8.

After compiler/cpu/fuse_dequant.py, A reads cast(X) * S, where X is the activation's int8 value at (row, k) and S
its block's scale, computed in the graph from the row itself. The kernel evaluates X and S once per row (the
block's max |x| once per block), into int8 rows and a float per block, and then, for each weight row and each
block of 32, sums the 32 products int8 x int8 exactly in int32 lanes and adds that sum times both scales into
fp32 accumulators: per block and row, one 32-byte load and six vector instructions, where the weight-only kernel
issues four loads and five multiply-adds (and widens the weights). On this project's AMD EPYC (Zen 3, AVX2, one
thread, 16 x 768 x 768) that is 27-35 G multiply-adds/s against 16-18; a 16-row decode step of bench/llm.py's
125M Llama spends 43 ms in kernels against float32's 69 ms and int8's 55 (bench/step_kernels.py, load 2.5-3).

The block dot is llama.cpp's Q8_0 x Q8_0: with |x|, |w| <= 127, `vpmaddubsw` multiplies |w| (as u8) by x with w's
sign (s8) into int16 pairs (at most 2 * 127 * 127, so it never saturates) and `vpmaddwd` sums the pairs into int32;
VNNI's `vpdpbusd` does both at once where the CPU has it; portable C otherwise, chosen when the C is compiled.
The sums are exact, so only the float accumulation's order differs from the reference interpreter's. Each row's
arithmetic is the same whatever rows share its group (QM), so a row's result depends on that row alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from luminal import dtypes as dt
from luminal.compiler.analysis.gemm_plan import GemmPlan, index_vars
from luminal.compiler.fusion.fuse import substitute_indices
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.settle import settle
from luminal.quantize import BLOCK
from luminal.symbolic import const, var

PRELUDE = """
/* W8A8 (compiler/cpu/codegen_w8a8.py): out[i] = sum over kb blocks b of s[b] * as[i][b] * sum_j a[i][32 b + j] *
   q[32 b + j], every int8 value within [-127, 127]; one weight row, QM activation rows. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define LM_I8PAIRS(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#elif defined(__AVXVNNI__)
#define LM_I8PAIRS(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#else
#define LM_I8PAIRS(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#endif
static inline float lm_hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
#define LM_Q8Q8DOT(NAME, QM)                                                                                  \\
  static inline void NAME(int64_t kb, const int8_t* restrict q, const float* restrict s,                     \\
                          const int8_t* const* a, const float* const* as, float* out) {                      \\
    __m256 acc[QM];                                                                                          \\
    _Pragma("GCC unroll 8") for (int i = 0; i < QM; i++) acc[i] = _mm256_setzero_ps();                       \\
    for (int64_t b = 0; b < kb; b++) {                                                                       \\
      const __m256i w = _mm256_loadu_si256((const __m256i*)(q + 32 * b));                                    \\
      const __m256i wabs = _mm256_sign_epi8(w, w);                                                           \\
      const __m256 ws = _mm256_set1_ps(s[b]);                                                                \\
      _Pragma("GCC unroll 8") for (int i = 0; i < QM; i++) {                                                 \\
        const __m256i x = _mm256_loadu_si256((const __m256i*)(a[i] + 32 * b));                               \\
        const __m256i d = LM_I8PAIRS(wabs, _mm256_sign_epi8(x, w));                                          \\
        const __m256 scale = _mm256_mul_ps(ws, _mm256_broadcast_ss(as[i] + b));                              \\
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), scale, acc[i]);                                      \\
      }                                                                                                      \\
    }                                                                                                        \\
    _Pragma("GCC unroll 8") for (int i = 0; i < QM; i++) out[i] = lm_hsum8(acc[i]);                          \\
  }
#else
#define LM_Q8Q8DOT(NAME, QM)                                                                                  \\
  static inline void NAME(int64_t kb, const int8_t* restrict q, const float* restrict s,                     \\
                          const int8_t* const* a, const float* const* as, float* out) {                      \\
    for (int i = 0; i < QM; i++) {                                                                           \\
      float acc = 0;                                                                                         \\
      for (int64_t b = 0; b < kb; b++) {                                                                     \\
        int32_t d = 0;                                                                                       \\
        for (int j = 0; j < 32; j++) d += (int32_t)a[i][32 * b + j] * (int32_t)q[32 * b + j];                \\
        acc += (float)d * (s[b] * as[i][b]);                                                                 \\
      }                                                                                                      \\
      out[i] = acc;                                                                                          \\
    }                                                                                                        \\
  }
#endif
LM_Q8Q8DOT(lm_q8q8dot1, 1)
LM_Q8Q8DOT(lm_q8q8dot4, 4)
"""

_BLOCK_VAR, _LANE_VAR = "lm_b", "lm_j"  # the C loop variables of the pack: block, and value within it


@dataclass(frozen=True)
class Q8Rows:
    """A's element (row, 32 lm_b + lm_j) is (float)values * scale: `values` an int8 value, `scale` a float32 one
    that reads no lm_j (one per block), both over the row's own indices and the two loop variables."""

    values: ir.Value
    scale: ir.Value


def q8_rows(gemm: GemmPlan) -> Q8Rows | None:
    """How A reads a Q8_0 activation, or None when A is anything else (a float operand: the weight-only kernel)."""
    c, a = gemm.contract, gemm.contract.a
    if not (isinstance(a, ir.Apply) and a.op == "Mul" and len(a.args) == 2 and a.dtype == dt.float32):
        return None
    casts = [v for v in a.args if isinstance(v, ir.Apply) and v.op == "Cast" and v.args[0].dtype == dt.int8]
    if len(casts) != 1 or not c.extent.is_const or c.extent.value % BLOCK:
        return None
    scale = a.args[1] if a.args[0] is casts[0] else a.args[0]
    if scale.dtype != dt.float32:
        return None
    blocks = c.extent.value // BLOCK
    block, lane = var(_BLOCK_VAR, 0, blocks - 1), var(_LANE_VAR, 0, BLOCK - 1)
    values = settle(substitute_indices(casts[0].args[0], {c.var: block * BLOCK + lane}))
    scale = settle(substitute_indices(scale, {c.var: block * BLOCK + lane}))
    if _LANE_VAR in index_vars(scale):
        return None  # the scale changes within a block: not Q8_0
    return Q8Rows(values, scale)


def pack_rows(emitter_cls, ptrs, rows: Q8Rows, loop: list[str]) -> list[str]:
    """A quantised once, in `loop` over its rows (lm_r): int8 values lm_qa[lm_r * K + k], scales lm_sa[lm_r KB + b]."""
    lines = ["  float* lm_sa = lm_gemm_pack_buffer(lm_nba * lm_M * (lm_KB + lm_K / 4) + 1);", "  if (!lm_sa) return 1;"]
    lines += ["  int8_t* lm_qa = (int8_t*)(lm_sa + lm_nba * lm_M * lm_KB);  /* after the scales: K / 4 floats a row */"]
    lines += loop + [f"    for (int64_t {_BLOCK_VAR} = 0; {_BLOCK_VAR} < lm_KB; {_BLOCK_VAR}++) {{"]
    block = emitter_cls(ptrs)
    block.indent = 3
    # The block's max |x|, once per block: the scale and every value read it.
    scale, values = block.hoisted_together((rows.scale, rows.values), _LANE_VAR, const(BLOCK))
    block.stmt(f"lm_sa[lm_r * lm_KB + {_BLOCK_VAR}] = {block.emit(scale)};")
    lane = emitter_cls(ptrs)
    lane.indent, lane.counter = 4, block.counter  # fresh names must not shadow the hoisted ones
    value = lane.emit(values)
    lines += block.lines + [f"      for (int64_t {_LANE_VAR} = 0; {_LANE_VAR} < 32; {_LANE_VAR}++) {{"]
    lines += lane.lines + [f"        lm_qa[(lm_r * lm_KB + {_BLOCK_VAR}) * 32 + {_LANE_VAR}] = (int8_t)({value});"]
    return lines + ["      }", "    }", "  }"]


@dataclass(frozen=True)
class RowsOfA:
    """What a Q8_0 GEMM's tile loop (codegen_qgemm.kernel_source) needs of A: statements before it (packing),
    declarations in each task, the statement that points row lm_i of a group at its data, and the dot functions
    (`dot` + "4" or "1") with the row arguments they take."""

    setup: list[str]
    declare: list[str]
    point: str
    dot: str
    rows: str


def rows_of_a(pack: list[str], batched: bool) -> RowsOfA:
    """The quantised rows of `pack_rows`, read by the int8 x int8 dot."""
    first = "lm_bt * lm_M" if batched else "0"  # the batch element's first row
    declare = ["    const int8_t* lm_arow[4];", "    const float* lm_asrow[4];", "    float lm_dot[4];"]
    declare += ["    int64_t lm_mstep = 4;", f"    const int64_t lm_r0 = {first};"]
    row = "(lm_r0 + lm_m0 + lm_i)"
    point = f"{{ lm_arow[lm_i] = lm_qa + {row} * lm_K; lm_asrow[lm_i] = lm_sa + {row} * lm_KB; }}"
    return RowsOfA(pack, declare, point, "lm_q8q8dot", "lm_arow, lm_asrow")
