// Stand-in for CUDA's mma.h on the CPU (see cuda_shim.h): the nvcuda::wmma API as its documentation defines
// it, for the shapes and types the generated kernels use (m16n16k16, __half or __nv_bfloat16 operands, float
// accumulators). On a GPU a fragment's elements are spread over a warp's lanes in an unspecified order, so
// portable code never reads them by position; here a fragment is the whole tile and lane 0 of the warp alone
// loads, multiplies and stores it (the other lanes' copies are never read: stores go through lane 0), which
// keeps the CPU's work that of one product per warp.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

inline float lm_widen(float f) { return f; }
inline float lm_widen(__half h) { return __half2float(h); }
inline float lm_widen(__nv_bfloat16 b) { return __bfloat162float(b); }

// A fragment is its whole Rows x Cols tile, row-major, widened to float (half products are exact in float).
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = rows * cols;
  float x[num_elements];
};

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
  for (float& e : f.x) e = value;
}

// A or B from memory whose rows (row_major) or columns (col_major) are `ldm` elements apart.
template <class Use, int M, int N, int K, class T, class Layout, class S>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const S* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  static_assert(std::is_same_v<S, T>, "a fragment loads elements of its own type");
  if (threadIdx.x % 32 != 0) return;
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++)
      f.x[r * F::cols + c] = lm_widen(std::is_same_v<Layout, col_major> ? p[c * ldm + r] : p[r * ldm + c]);
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout) {
  if (threadIdx.x % 32 != 0) return;
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++) f.x[r * N + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

// d = a * b + c, each sum in float (a tensor core's order of additions is its own; products are exact).
template <int M, int N, int K, class T, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
              const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  if (threadIdx.x % 32 != 0) return;
  float out[M * N];
  for (int r = 0; r < M; r++)
    for (int col = 0; col < N; col++) {
      float acc = c.x[r * N + col];
      for (int k = 0; k < K; k++) acc = std::fmaf(a.x[r * K + k], b.x[k * N + col], acc);
      out[r * N + col] = acc;
    }
  for (int e = 0; e < M * N; e++) d.x[e] = out[e];
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
  if (threadIdx.x % 32 != 0) return;
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
}
}  // namespace nvcuda::wmma
