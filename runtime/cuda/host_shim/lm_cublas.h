// What a "cublas" step of the launch plan computes (compiler/cuda/library_gemm.py), on the CPU: the meaning of
// cublasGemmStridedBatchedEx with alpha 1, beta 0 and fp32 sums, for the data types the steps use (cudaDataType
// 0 float, 2 half, 14 bfloat16). Column-major, as cuBLAS: op(A) is m x k, op(B) k x n, C m x n; a transposed
// operand's element (r, c) is stored at c + r * ld. The shim's driver calls it where the runtime calls cuBLAS.
#pragma once
#include <cstdint>

inline float lm_blas_load(const void* p, int type, int64_t i) {
  if (type == 2) return __half2float(((const __half*)p)[i]);
  if (type == 14) return __bfloat162float(((const __nv_bfloat16*)p)[i]);
  return ((const float*)p)[i];
}

inline void lm_blas_store(void* p, int type, int64_t i, float v) {
  if (type == 2) ((__half*)p)[i] = __float2half_rn(v);
  else if (type == 14) ((__nv_bfloat16*)p)[i] = __float2bfloat16_rn(v);
  else ((float*)p)[i] = v;
}

inline void lm_cublas_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k,
                           const void* A, int at, int64_t lda, int64_t sa,
                           const void* B, int bt, int64_t ldb, int64_t sb,
                           void* C, int ct, int64_t ldc, int64_t sc, int64_t batch) {
  for (int64_t b = 0; b < batch; b++)
    for (int64_t j = 0; j < n; j++)
      for (int64_t i = 0; i < m; i++) {
        float sum = 0.0f;
        for (int64_t l = 0; l < k; l++) {
          const float x = lm_blas_load(A, at, b * sa + (ta ? l + i * lda : i + l * lda));
          const float y = lm_blas_load(B, bt, b * sb + (tb ? j + l * ldb : l + j * ldb));
          sum = fmaf(x, y, sum);
        }
        lm_blas_store(C, ct, b * sc + i + j * ldc, sum);
      }
}
