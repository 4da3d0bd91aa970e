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
AVX-VNNI's `vpdpbusd` does both at once; portable C otherwise, chosen when the C is compiled. With AVX-512 VNNI the
sign ops go too: the weights enter `vpdpbusd` as w + 128 (u8) and each lane starts from -128 times its four
activations' sum, computed once per row when the row is packed; two blocks fill a zmm (their scales in its two
halves), and a register tile of 4 weight rows x 4 rows loads each vector once for four pairs. On this project's AMD
EPYC (Zen 4, one thread, 16 rows, K = 768) the dot runs 1.2-1.4x the sign-trick kernel's speed (1.4-1.7x in a
standalone benchmark); bench/step_kernels.py --rows 16 --quantize w8a8 spends 33-36 ms in GEMMs against 38, one
thread (load 1.3-4.2). The sums are exact, so only the float accumulation's order differs from the reference
interpreter's. Each row's arithmetic is the same whatever rows and weight rows share its tile, so a row's result
depends on that row alone.
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
/* W8A8 (compiler/cpu/codegen_w8a8.py): out[4 r + i] = sum over kb blocks b of s[r][b] * as[i][b] * sum_j a[i][32 b + j]
   * q[r][32 b + j], every int8 value within [-127, 127]; NR weight rows r, QM activation rows i. ac[i] holds row
   i's lane corrections (lm_q8_lane_corrections), which only the AVX-512 VNNI form reads, as it alone prefetches
   `next` (the weight rows of the next call). */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
/* ac[8 b + l] = -128 * (the sum of a[32 b + 4 l .. 4 l + 3]): vpdpbusd multiplies unsigned by signed bytes, so the
   kernel feeds it the weights plus 128 (w ^ 0x80, in [1, 255]) and starts each lane from this, leaving exactly the
   lane's sum of a * w (|sums| < 2^18: no overflow). Once per row, where the sign trick costs an op per pair. */
static inline void lm_q8_lane_corrections(const int8_t* a, int64_t kb, int32_t* ac) {
  for (int64_t l = 0; l < 8 * kb; l++) ac[l] = -128 * ((int32_t)a[4 * l] + a[4 * l + 1] + a[4 * l + 2] + a[4 * l + 3]);
}
/* Two blocks from p into one zmm, or (two == 0, the last of an odd count) one, the upper half zero: the masked
   loads read nothing past the block. */
static inline __attribute__((always_inline)) __m512i lm_q8_blocks(const void* p, int two) {
  return two ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p);
}
static inline __attribute__((always_inline)) __m512i lm_q8_lanes(const int32_t* p, int two) {
  return two ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(0x00FF, p);
}
static inline __attribute__((always_inline)) __m512 lm_q8_scales(const float* p, int two) {  /* [p0 x8 | p1 x8] */
  const __m512 low = _mm512_zextps256_ps512(_mm256_broadcast_ss(p));
  return two ? _mm512_insertf32x8(low, _mm256_broadcast_ss(p + 1), 1) : low;
}
/* One register tile: NR weight rows x QM activation rows, two blocks per zmm, so each loaded vector serves QM or NR
   pairs. Per pair and two blocks: vpdpbusd, a conversion, a scale product and an FMA. A pair's arithmetic is the
   same in every tile shape, so a row's result does not depend on the rows that share its tile. Several weight rows
   are interleaved streams, which the hardware prefetcher follows poorly: hence the software prefetch of `next`. */
#define LM_Q8Q8DOT(NAME, NR, QM)                                                                                    \\
  static inline __attribute__((always_inline)) void NAME##_blocks(                                                  \\
      int64_t b, int two, const int8_t* const* q, const float* const* s, const int8_t* const* a,                    \\
      const float* const* as, const int32_t* const* ac, const int8_t* const* next,                                  \\
      __m512 acc[NR][QM]) {                                                                                         \\
    __m512i wu[NR];                                                                                                 \\
    __m512 ws[NR];                                                                                                  \\
    _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                                          \\
      wu[r] = _mm512_xor_si512(lm_q8_blocks(q[r] + 32 * b, two), _mm512_set1_epi8((char)0x80));                     \\
      ws[r] = lm_q8_scales(s[r] + b, two);                                                                          \\
      if (NR > 1) _mm_prefetch((const char*)(next[r] + 32 * b), _MM_HINT_T0);                                       \\
    }                                                                                                               \\
    _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) {                                                          \\
      const __m512i x = lm_q8_blocks(a[i] + 32 * b, two), c = lm_q8_lanes(ac[i] + 8 * b, two);                      \\
      const __m512 xs = lm_q8_scales(as[i] + b, two);                                                               \\
      _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                                        \\
        const __m512i d = _mm512_dpbusd_epi32(c, wu[r], x);                                                         \\
        acc[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ws[r], xs), acc[r][i]);                    \\
      }                                                                                                             \\
    }                                                                                                               \\
  }                                                                                                                 \\
  static inline void NAME(int64_t kb, const int8_t* const* q, const float* const* s, const int8_t* const* a,        \\
                          const float* const* as, const int32_t* const* ac, const int8_t* const* next,              \\
                          float* out) {                                                                             \\
    __m512 acc[NR][QM];                                                                                             \\
    _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++)                                                            \\
      _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) acc[r][i] = _mm512_setzero_ps();                         \\
    int64_t b = 0;                                                                                                  \\
    for (; b + 2 <= kb; b += 2) NAME##_blocks(b, 1, q, s, a, as, ac, next, acc);                                    \\
    if (b < kb) NAME##_blocks(b, 0, q, s, a, as, ac, next, acc);                                                    \\
    _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++)                                                            \\
      _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) out[4 * r + i] = _mm512_reduce_add_ps(acc[r][i]);        \\
  }
#else
static inline void lm_q8_lane_corrections(const int8_t* a, int64_t kb, int32_t* ac) {
  (void)a, (void)kb, (void)ac; /* the forms below take the signs from the values themselves */
}
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#if defined(__AVXVNNI__)
#define LM_I8PAIRS(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#else
#define LM_I8PAIRS(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#endif
static inline float lm_hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
/* One weight row, QM activation rows: |w| (u8) times x with w's sign (s8), so the unsigned-by-signed pairs apply */
#define LM_Q8Q8ROW(NAME, QM)                                                                                  \\
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
#define LM_Q8Q8ROW(NAME, QM)                                                                                  \\
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
/* Without 512-bit VNNI the weight rows of a tile go one at a time (the sign trick costs an op per pair anyway). */
#define LM_Q8Q8DOT(NAME, NR, QM)                                                                                    \\
  LM_Q8Q8ROW(NAME##_row, QM)                                                                                        \\
  static inline void NAME(int64_t kb, const int8_t* const* q, const float* const* s, const int8_t* const* a,        \\
                          const float* const* as, const int32_t* const* ac, const int8_t* const* next,              \\
                          float* out) {                                                                             \\
    (void)ac, (void)next;                                                                                           \\
    for (int r = 0; r < NR; r++) NAME##_row(kb, q[r], s[r], a, as, out + 4 * r);                                    \\
  }
#endif
LM_Q8Q8DOT(lm_q8q8dot4x4, 4, 4)
LM_Q8Q8DOT(lm_q8q8dot4x1, 4, 1)
LM_Q8Q8DOT(lm_q8q8dot1x4, 1, 4)
LM_Q8Q8DOT(lm_q8q8dot1x1, 1, 1)
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
    """A quantised once, in `loop` over its rows (lm_r): int8 values lm_qa[lm_r * K + k], scales lm_sa[lm_r KB + b],
    lane corrections lm_ca[(lm_r KB + b) * 8 + l] (lm_q8_lane_corrections)."""
    lines = [
        "  float* lm_sa = lm_gemm_pack_buffer(lm_nba * lm_M * (9 * lm_KB + lm_K / 4) + 1);",
        "  if (!lm_sa) return 1;",
    ]
    lines += ["  int8_t* lm_qa = (int8_t*)(lm_sa + lm_nba * lm_M * lm_KB);  /* after the scales: K / 4 floats a row */"]
    lines += ["  int32_t* lm_ca = (int32_t*)(lm_qa + lm_nba * lm_M * lm_K);  /* after the values: 8 a block */"]
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
    return lines + [
        "      }",
        "    }",
        "    lm_q8_lane_corrections(lm_qa + lm_r * lm_K, lm_KB, lm_ca + lm_r * lm_KB * 8);",
        "  }",
    ]


@dataclass(frozen=True)
class RowsOfA:
    """What a Q8_0 GEMM's tile loop (codegen_qgemm.kernel_source) needs of A: statements before it (packing),
    declarations in each task, the statement that points row lm_i of a group at its data, how many weight rows a dot
    takes at most (`weight_rows`), and `calls`: the statements that dot lm_nstep weight rows (lm_qrow[], lm_srow[])
    with lm_mstep rows of A into lm_dot[4 * weight row + row]."""

    setup: list[str]
    declare: list[str]
    point: str
    weight_rows: int
    calls: list[str]


def rows_of_a(pack: list[str], batched: bool) -> RowsOfA:
    """The quantised rows of `pack_rows`, read by the int8 x int8 dot in register tiles of up to 4 x 4."""
    first = "lm_bt * lm_M" if batched else "0"  # the batch element's first row
    declare = ["    const int8_t* lm_arow[4];", "    const float* lm_asrow[4];", "    const int32_t* lm_acrow[4];"]
    declare += ["    int64_t lm_mstep = 4;", f"    const int64_t lm_r0 = {first};"]
    row = "(lm_r0 + lm_m0 + lm_i)"
    point = f"{{ lm_arow[lm_i] = lm_qa + {row} * lm_K; lm_asrow[lm_i] = lm_sa + {row} * lm_KB;"
    point += f" lm_acrow[lm_i] = lm_ca + {row} * lm_KB * 8; }}"
    args = "(lm_KB, lm_qrow, lm_srow, lm_arow, lm_asrow, lm_acrow, lm_qnext, lm_dot);"
    calls = [f"if (lm_nstep == 4 && lm_mstep == 4) lm_q8q8dot4x4{args}", f"else if (lm_nstep == 4) lm_q8q8dot4x1{args}"]
    calls += [f"else if (lm_mstep == 4) lm_q8q8dot1x4{args}", f"else lm_q8q8dot1x1{args}"]
    return RowsOfA(pack, declare, point, 4, calls)
