"""Integer GEMMs: an int32 sum of products whose operands fit int16, run as packed int16 pairs.

A quantized matmul (MatMulInteger, QLinearMatMul: luminal/onnx/ops/quantization.py) is sum_k (a - a_zero)
(b - b_zero) over uint8/int8 values, accumulated in int32. Each centred operand lies in [-255, 255]
(compiler/kernels/int_ranges.py proves it from the loads' and casts' types), so packing evaluates it once per element
(the zero points are subtracted there, O(MK + KN) work) and stores it as int16; the micro-kernel then multiplies
adjacent pairs along the contraction into int32 lanes: AVX-512 VNNI's `vpdpwssd`, else `vpmaddwd` (AVX-512BW,
AVX2), else portable vector code, chosen when the C is compiled. Every product of two int16 values and every
sum of two such products is exact in int32 or wraps as int32 does (only (-2^15)^2 + (-2^15)^2 reaches 2^31),
and int32 addition wraps in any order to the same value, so the result equals the reference's int32 sum
exactly. (u8 x s8 `vpmaddubsw` would saturate its int16 pair sums, so it is not used.)

Not yet recognised: a convolution's contraction (ConvInteger, QLinearConv) in the tested models, whose operands
(padding guards over int32 buffers) are not proven to fit; it stays an exact int32 loop.

Which kernels are integer GEMMs is an analysis (compiler/analysis/int_gemm_plan.py: every target's cost model
charges their packing); this module holds the CPU's micro-kernel. The kernel's loops, packing and epilogue are
the float GEMM's (compiler/cpu/codegen_gemm.py) with int16 panels laid out in pairs: a panel's element (row w, k)
sits at (k / 2) 2 width + 2 w + k % 2.
"""

from __future__ import annotations

# The micro-kernel: c[0:MR, 0:NR] (int32, row stride ldc) = (first ? 0 : c) + A times B over kp pairs, A's
# panel pair p holding rows i's (a[i][2p], a[i][2p+1]) as one int32 (broadcast), B's the NR columns' pairs.
PRELUDE = """
typedef int32_t lm_vi __attribute__((vector_size(LM_VBYTES)));
#if LM_VBYTES == 64 && defined(__AVX512VNNI__)
#include <immintrin.h>
#define LM_PAIRS(acc, b, a) ((lm_vi)_mm512_dpwssd_epi32((__m512i)(acc), (__m512i)(b), (__m512i)(a)))
#elif LM_VBYTES == 64 && defined(__AVX512BW__)
#include <immintrin.h>
#define LM_PAIRS(acc, b, a) ((acc) + (lm_vi)_mm512_madd_epi16((__m512i)(b), (__m512i)(a)))
#elif LM_VBYTES == 32 && defined(__AVX2__)
#include <immintrin.h>
#define LM_PAIRS(acc, b, a) ((acc) + (lm_vi)_mm256_madd_epi16((__m256i)(b), (__m256i)(a)))
#else
/* Each int32 lane holds two int16 values: the low one sign-extended by shifting up and back, the high by
   an arithmetic shift; int32 arithmetic wraps (-fwrapv). */
static inline lm_vi lm_pairs(lm_vi acc, lm_vi b, lm_vi a) {
  return acc + ((b << 16) >> 16) * ((a << 16) >> 16) + (b >> 16) * (a >> 16);
}
#define LM_PAIRS(acc, b, a) lm_pairs(acc, b, a)
#endif
static inline void lm_imicro(int64_t kp, const int16_t* restrict a, const int16_t* restrict b,
                             int32_t* restrict c, int64_t ldc, int first) {
  lm_vi acc0[LM_MR], acc1[LM_MR];
  _Pragma("GCC unroll 16") for (int i = 0; i < LM_MR; i++) { acc0[i] = (lm_vi){0}; acc1[i] = (lm_vi){0}; }
  for (int64_t p = 0; p < kp; p++) {
    lm_vi b0, b1;
    memcpy(&b0, b + 2 * LM_NR * p, LM_VBYTES);
    memcpy(&b1, b + 2 * LM_NR * p + 2 * LM_VL, LM_VBYTES);
    _Pragma("GCC unroll 16") for (int i = 0; i < LM_MR; i++) {
      int32_t pair;
      memcpy(&pair, a + 2 * (LM_MR * p + i), 4);
      const lm_vi ai = (lm_vi){0} + pair;
      acc0[i] = LM_PAIRS(acc0[i], b0, ai);
      acc1[i] = LM_PAIRS(acc1[i], b1, ai);
    }
  }
  _Pragma("GCC unroll 16") for (int i = 0; i < LM_MR; i++) {
    lm_vi t0 = acc0[i], t1 = acc1[i], old0, old1;
    if (!first) {
      memcpy(&old0, c + i * ldc, LM_VBYTES);
      memcpy(&old1, c + i * ldc + LM_VL, LM_VBYTES);
      t0 += old0;
      t1 += old1;
    }
    memcpy(c + i * ldc, &t0, LM_VBYTES);
    memcpy(c + i * ldc + LM_VL, &t1, LM_VBYTES);
  }
}
"""
