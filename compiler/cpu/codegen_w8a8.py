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
sign ops go too: the weights enter `vpdpbusd` as w + 128 (u8) and each block's sum starts from -128 times its
activations' sum, computed once per row when the row is packed. That form also transposes rows and weights by groups
of 8 blocks, so that each block's sum gathers in int32 lanes of its own and is converted and scaled once, and
prepares four weight rows once for all rows of A: the form before it (a lane per 4 values, a scale product per pair
and two blocks) was bound by its multiply pipes, not by the weight stream (8-9 GB/s of weights at 16 rows on one
core of this project's Zen 5, from L2 as from DRAM); bench/q8_step_ab.py --rows 16 --quantize w8a8 (one thread, load
2): GEMMs 16.5 -> 10.6 ms, and at one row 3.45 -> 2.96 ms. The sums are exact, so only the float accumulation's
order differs from the reference interpreter's. Each row's arithmetic is the same whatever rows and weight rows share
its tile, so a row's result depends on that row alone.
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
   * q[r][32 b + j], every int8 value within [-127, 127]; NR weight rows r, QM activation rows i. Each activation row
   is stored in LM_Q8_ROW_BLOCKS(kb) blocks and prepared once (lm_q8_prepare_row) into the layout its form reads, with
   LM_Q8_ROW_LANES(kb) int32 at ac[i]; the 4-row dots read weight rows prepared by lm_q8_prepare_weights. Only the
   AVX-512 VNNI form changes the rows, and alone prefetches the next weight rows. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#define LM_Q8_ROW_BLOCKS(kb) (((kb) + 7) / 8 * 8) /* whole groups of 8 blocks, zero-padded */
#define LM_Q8_ROW_LANES(kb) (2 * LM_Q8_ROW_BLOCKS(kb))
/* A group of 8 blocks (256 bytes: four vectors of two blocks) to four vectors v[t] whose lane 4 L + e holds dword
   4 (L % 2) + t of block 2 e + L / 2: the same blocks in the same lanes of all four, so vpdpbusd on them sums each
   block within two int32 lanes (L even and odd) rather than across eight. */
static inline __attribute__((always_inline)) void lm_q8_transpose(__m512i v[4]) {
  const __m512i s0 = _mm512_unpacklo_epi32(v[0], v[1]), s1 = _mm512_unpackhi_epi32(v[0], v[1]);
  const __m512i s2 = _mm512_unpacklo_epi32(v[2], v[3]), s3 = _mm512_unpackhi_epi32(v[2], v[3]);
  v[0] = _mm512_unpacklo_epi64(s0, s2), v[1] = _mm512_unpackhi_epi64(s0, s2);
  v[2] = _mm512_unpacklo_epi64(s1, s3), v[3] = _mm512_unpackhi_epi64(s1, s3);
}
/* Pads row a to whole groups with zeros and transposes each group in place (lm_q8_transpose); ac[16 g + 4 L + e]
   (L even) = -128 * the sum of the group's block 2 e + L / 2, the rest 0: vpdpbusd multiplies unsigned by signed
   bytes, so the kernel feeds it the weights plus 128 (w ^ 0x80, in [1, 255]) and starts the lanes from this, leaving
   exactly the block's sum of a * w (|sums| < 2^19: no overflow). */
static inline void lm_q8_prepare_row(int8_t* a, int64_t kb, int32_t* ac) {
  memset(a + 32 * kb, 0, 32 * (LM_Q8_ROW_BLOCKS(kb) - kb));
  for (int64_t g = 0; g < LM_Q8_ROW_BLOCKS(kb) / 8; g++) {
    int8_t* p = a + 256 * g;
    __m512i v[4], half = _mm512_setzero_si512();
    for (int m = 0; m < 4; m++) v[m] = _mm512_loadu_si512(p + 64 * m);
    lm_q8_transpose(v);
    for (int m = 0; m < 4; m++) {
      _mm512_storeu_si512(p + 64 * m, v[m]);
      half = _mm512_dpbusd_epi32(half, _mm512_set1_epi8(1), v[m]); /* lane 4 L + e: half of block 2 e + L / 2 */
    }
    const __m512i block = _mm512_add_epi32(half, _mm512_shuffle_i32x4(half, half, 0xB1)); /* L and L ^ 1 */
    _mm512_storeu_si512(ac + 16 * g, _mm512_maskz_mullo_epi32(0x0F0F, block, _mm512_set1_epi32(-128)));
  }
}
/* The m-th vector of a weight row's group of n blocks, the bytes past them zero (read nothing past the row). */
static inline __attribute__((always_inline)) __m512i lm_q8_group_part(const int8_t* p, int m, int64_t n) {
  if (n == 8) return _mm512_loadu_si512(p + 64 * m);
  const int64_t bytes = 32 * n - 64 * m;
  return _mm512_maskz_loadu_epi8(bytes >= 64 ? ~0ull : bytes <= 0 ? 0 : (1ull << bytes) - 1, p + 64 * m);
}
/* The group's n scales in the lanes lm_q8_pair_sums leaves its blocks in (block 2 e + L % 2 at lane 4 L + e), twice */
static inline __attribute__((always_inline)) __m512 lm_q8_group_scales(const float* s, int64_t n) {
  const __m512 v = n == 8 ? _mm512_castps256_ps512(_mm256_loadu_ps(s)) : _mm512_maskz_loadu_ps((1u << n) - 1, s);
  return _mm512_permutexvar_ps(_mm512_set_epi32(7, 5, 3, 1, 6, 4, 2, 0, 7, 5, 3, 1, 6, 4, 2, 0), v);
}
/* Two pairs' lane sums (lm_q8_transpose's layout: block 2 e + L / 2 in lanes 4 L + e, L even and odd) added into one
   block per lane: pair p's 8 blocks in the low half, q's in the high, block 2 e + L % 2 at lane 4 L + e. */
static inline __attribute__((always_inline)) __m512i lm_q8_pair_sums(__m512i p, __m512i q) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(p, q, 0x88), _mm512_shuffle_i32x4(p, q, 0xDD));
}
/* The sum of 8 floats, in one order wherever they sit */
static inline __attribute__((always_inline)) float lm_q8_hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
/* A weight row's group of 8 blocks as the dot reads it: plus 128 (w ^ 0x80) and transposed (lm_q8_transpose) */
static inline __attribute__((always_inline)) void lm_q8_weight_group(const int8_t* q, int64_t g, int64_t kb,
                                                                     __m512i w[4]) {
  const int64_t n = kb - 8 * g < 8 ? kb - 8 * g : 8;
  _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++)
    w[m] = _mm512_xor_si512(lm_q8_group_part(q + 256 * g, m, n), _mm512_set1_epi8((char)0x80));
  lm_q8_transpose(w);
}
/* Four weight rows q[r] prepared once (lm_q8_weight_group) into t, LM_Q8_ROW_BLOCKS(kb) blocks a row, rows[r]
   pointing at them, for every group of rows of A that multiplies them (the 4-row dots read them so); the next four
   rows, interleaved streams that the hardware prefetcher follows poorly, prefetched meanwhile. */
#define LM_Q8_PREPARED_BYTES(kb) (4 * 32 * LM_Q8_ROW_BLOCKS(kb))
/* How far ahead a lone weight row's dot prefetches its stream (in place, the rows follow each other): without it, one
   row of A read 21-24 GB/s of weights on one core of this project's Zen 5, the form before this one 33-35, with it
   31-33 (1024: 28, 2048: 31, 8192: 30-32). */
#ifndef LM_Q8_AHEAD
#define LM_Q8_AHEAD 4096
#endif
static inline void lm_q8_prepare_weights(int64_t kb, const int8_t* const* q, const int8_t* const* next, int8_t* t,
                                         const int8_t** rows) {
  for (int r = 0; r < 4; r++) {
    int8_t* row = t + r * 32 * LM_Q8_ROW_BLOCKS(kb);
    for (int64_t g = 0; 8 * g < kb; g++) {
      __m512i w[4];
      lm_q8_weight_group(q[r], g, kb, w);
      for (int m = 0; m < 4; m++) {
        _mm512_storeu_si512(row + 256 * g + 64 * m, w[m]);
        if (8 * g + 2 * m < kb) _mm_prefetch((const char*)(next[r] + 256 * g + 64 * m), _MM_HINT_T0);
      }
    }
    rows[r] = row;
  }
}
/* One register tile: NR weight rows x QM activation rows, a group of 8 blocks at a time. Per weight row and group:
   four vectors (lm_q8_weight_group: four loads, four xors and eight shuffles; or, with NR = 4, loaded as
   lm_q8_prepare_weights left them, once for all rows of A) shared by the QM pairs; per pair: four vpdpbusd into
   block sums (exact), and per two pairs, one vector of 16 block sums converted, scaled and added: per pair and block,
   half a vpdpbusd and 3 / 16 of a float op. The form before this one (a lane per 4 values, and a scale product per
   pair and two blocks) kept the multiply pipes busy: 8-9 GB/s of weights at 16 rows on one core of this project's
   Zen 5, bound by its arithmetic whether the weights came from L2 or DRAM. Pairs are combined in order (r, i),
   (r, i + 1) or (r, 0), (r + 1, 0), a lone pair with itself; a pair's arithmetic is the same in either half of any
   tile shape, so a row's result does not depend on the rows that share its tile. */
#define LM_Q8Q8DOT(NAME, NR, QM)                                                                                    \\
  static inline void NAME(int64_t kb, const int8_t* const* q, const float* const* s, const int8_t* const* a,        \\
                          const float* const* as, const int32_t* const* ac, float* out) {                           \\
    enum { NP = (NR * QM + 1) / 2 };                                                                                \\
    __m512 acc[NP];                                                                                                 \\
    _Pragma("GCC unroll 8") for (int u = 0; u < NP; u++) acc[u] = _mm512_setzero_ps();                              \\
    for (int64_t g = 0; 8 * g < kb; g++) {                                                                          \\
      const int64_t b0 = 8 * g, n = kb - b0 < 8 ? kb - b0 : 8;                                                      \\
      __m512i d[NR][QM];                                                                                            \\
      _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) {                                                        \\
        __m512i w[4];                                                                                               \\
        if (NR > 1)                                                                                                 \\
          _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) w[m] = _mm512_loadu_si512(q[r] + 256 * g + 64 * m);   \\
        else {                                                                                                      \\
          lm_q8_weight_group(q[r], g, kb, w);                                                                       \\
          _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++)                                                       \\
            _mm_prefetch((const char*)((uintptr_t)(q[r] + 256 * g + 64 * m) + LM_Q8_AHEAD), _MM_HINT_T0);            \\
        }                                                                                                           \\
        _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) {                                                      \\
          d[r][i] = _mm512_loadu_si512(ac[i] + 16 * g);                                                             \\
          _Pragma("GCC unroll 4") for (int t = 0; t < 4; t++)                                                       \\
            d[r][i] = _mm512_dpbusd_epi32(d[r][i], w[t], _mm512_loadu_si512(a[i] + 256 * g + 64 * t));              \\
        }                                                                                                           \\
      }                                                                                                             \\
      __m512 ws[NR], xs[QM];                                                                                        \\
      _Pragma("GCC unroll 4") for (int r = 0; r < NR; r++) ws[r] = lm_q8_group_scales(s[r] + b0, n);                \\
      _Pragma("GCC unroll 4") for (int i = 0; i < QM; i++) xs[i] = lm_q8_group_scales(as[i] + b0, n);               \\
      _Pragma("GCC unroll 8") for (int u = 0; u < NP; u++) {                                                        \\
        const int p = 2 * u, h = 2 * u + 1 < NR * QM ? 2 * u + 1 : 2 * u;                                           \\
        const __m512 scale = _mm512_mul_ps(_mm512_mask_blend_ps(0xFF00, ws[p / QM], ws[h / QM]),                    \\
                                           _mm512_mask_blend_ps(0xFF00, xs[p % QM], xs[h % QM]));                   \\
        const __m512i sums = lm_q8_pair_sums(d[p / QM][p % QM], d[h / QM][h % QM]);                                 \\
        acc[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[u]);                                          \\
      }                                                                                                             \\
    }                                                                                                               \\
    _Pragma("GCC unroll 8") for (int u = 0; u < NP; u++) {                                                          \\
      const int p = 2 * u, h = 2 * u + 1;                                                                           \\
      out[4 * (p / QM) + p % QM] = lm_q8_hsum8(_mm512_castps512_ps256(acc[u]));                                     \\
      if (h < NR * QM) out[4 * (h / QM) + h % QM] = lm_q8_hsum8(_mm512_extractf32x8_ps(acc[u], 1));                 \\
    }                                                                                                               \\
  }
#else
#define LM_Q8_ROW_BLOCKS(kb) (kb)
#define LM_Q8_ROW_LANES(kb) 0
#define LM_Q8_PREPARED_BYTES(kb) 1
static inline void lm_q8_prepare_row(int8_t* a, int64_t kb, int32_t* ac) {
  (void)a, (void)kb, (void)ac; /* the forms below read the rows as they are, and take the signs from the values */
}
static inline void lm_q8_prepare_weights(int64_t kb, const int8_t* const* q, const int8_t* const* next, int8_t* t,
                                         const int8_t** rows) {
  (void)kb, (void)next, (void)t; /* the rows as they are */
  for (int r = 0; r < 4; r++) rows[r] = q[r];
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
                          const float* const* as, const int32_t* const* ac, float* out) {                           \\
    (void)ac;                                                                                                       \\
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
    """A quantised once, in `loop` over its rows (lm_r): scales lm_sa[lm_r KB + b], int8 values from lm_qa + lm_r
    lm_QS (lm_QS bytes a row), then prepared for the dot (lm_q8_prepare_row), lm_QL int32 from lm_ca + lm_r lm_QL."""
    lines = [
        "  const int64_t lm_QS = 32 * LM_Q8_ROW_BLOCKS(lm_KB), lm_QL = LM_Q8_ROW_LANES(lm_KB);",
        "  float* lm_sa = lm_gemm_pack_buffer(lm_nba * lm_M * (lm_KB + lm_QS / 4 + lm_QL) + 1);",
        "  if (!lm_sa) return 1;",
    ]
    lines += ["  int8_t* lm_qa = (int8_t*)(lm_sa + lm_nba * lm_M * lm_KB);  /* after the scales */"]
    lines += ["  int32_t* lm_ca = (int32_t*)(lm_qa + lm_nba * lm_M * lm_QS);  /* after the values */"]
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
    lines += lane.lines + [f"        lm_qa[lm_r * lm_QS + {_BLOCK_VAR} * 32 + {_LANE_VAR}] = (int8_t)({value});"]
    return lines + [
        "      }",
        "    }",
        "    lm_q8_prepare_row(lm_qa + lm_r * lm_QS, lm_KB, lm_ca + lm_r * lm_QL);",
        "  }",
    ]


@dataclass(frozen=True)
class RowsOfA:
    """What a Q8_0 GEMM's tile loop (codegen_qgemm.kernel_source) needs of A: statements before it (packing),
    declarations in each task, the statement that points row lm_i of a group at its data, how many weight rows a dot
    takes at most (`weight_rows`), `prepare`: the statements run once lm_nstep weight rows (lm_qrow[], lm_srow[], the
    next ones lm_qnext[]) are pointed at, and `calls`: the statements that dot them with lm_mstep rows of A into
    lm_dot[4 * weight row + row]."""

    setup: list[str]
    declare: list[str]
    point: str
    weight_rows: int
    prepare: list[str]
    calls: list[str]


def rows_of_a(pack: list[str], batched: bool) -> RowsOfA:
    """The quantised rows of `pack_rows`, read by the int8 x int8 dot in register tiles of up to 4 x 4."""
    first = "lm_bt * lm_M" if batched else "0"  # the batch element's first row
    declare = ["    const int8_t* lm_arow[4];", "    const float* lm_asrow[4];", "    const int32_t* lm_acrow[4];"]
    declare += ["    int64_t lm_mstep = 4;", f"    const int64_t lm_r0 = {first};"]
    declare += [
        "    int8_t lm_qt[LM_Q8_PREPARED_BYTES(lm_KB)] __attribute__((aligned(64)));",
        "    const int8_t* lm_qp[4];",
    ]
    row = "(lm_r0 + lm_m0 + lm_i)"
    point = f"{{ lm_arow[lm_i] = lm_qa + {row} * lm_QS; lm_asrow[lm_i] = lm_sa + {row} * lm_KB;"
    point += f" lm_acrow[lm_i] = lm_ca + {row} * lm_QL; }}"
    # Four weight rows are prepared once for all rows of A (lm_q8_prepare_weights); one is read as it is.
    prepare = ["if (lm_nstep == 4) lm_q8_prepare_weights(lm_KB, lm_qrow, lm_qnext, lm_qt, lm_qp);"]
    four, one = (
        "(lm_KB, " + rows + ", lm_srow, lm_arow, lm_asrow, lm_acrow, lm_dot);" for rows in ("lm_qp", "lm_qrow")
    )
    calls = [f"if (lm_nstep == 4 && lm_mstep == 4) lm_q8q8dot4x4{four}", f"else if (lm_nstep == 4) lm_q8q8dot4x1{four}"]
    calls += [f"else if (lm_mstep == 4) lm_q8q8dot1x4{one}", f"else lm_q8q8dot1x1{one}"]
    return RowsOfA(pack, declare, point, 4, prepare, calls)
