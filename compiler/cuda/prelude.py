"""The helpers every generated CUDA program starts with: half-type rounding, nan-aware max, selects, Python's
floor division, and the warp and block folds that cooperative reductions end with.

The folds are xor butterflies: every lane ends with the same value (IEEE addition is commutative, so each pair of
lanes computes the same sum), which lets any lane use the result without a broadcast. A block fold goes through
one word of shared memory per warp; it starts with a barrier so that a fold never overwrites what the previous
fold's lanes are still reading.
"""

from luminal.compiler.renderer import float64, integers
from luminal.symbolic import c_prelude

PRELUDE = (
    """#include <math.h>
#include <stdint.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
"""
    + c_prelude("static __device__ inline")
    + """static __device__ inline float lm_round_f16(float f) { return __half2float(__float2half_rn(f)); }
static __device__ inline float lm_round_bf16(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }
static __device__ inline float lm_maxf(float acc, float v) { return (v > acc || v != v) ? v : acc; }
static __device__ inline float lm_selectf(int c, float a, float b) { return c ? a : b; }
"""
    + integers.prelude("static __device__ inline")
    + float64.prelude("static __device__ inline")
    + """struct lm_fold_sum {
  template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct lm_fold_fmax {  /* the larger, a nan ignored: attention's running peak, as the C's comparison gives */
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct lm_fold_max {
  __device__ float operator()(float a, float b) const { return lm_maxf(a, b); }
  template <class T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};
/* double's max propagates nan as float's does: a specialization, not an overload (a double overload would make
   a narrow integer's call, which reaches the float one through promotion, ambiguous) */
template <> __device__ double lm_fold_max::operator()<double>(double a, double b) const { return lm_maxd(a, b); }
static __device__ inline float lm_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
static __device__ inline double lm_shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
static __device__ inline int32_t lm_shfl_xor(int32_t v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
static __device__ inline int64_t lm_shfl_xor(int64_t v, int m) {
  return (int64_t)__shfl_xor_sync(0xffffffffu, (long long)v, m);
}
static __device__ inline uint8_t lm_shfl_xor(uint8_t v, int m) {
  return (uint8_t)__shfl_xor_sync(0xffffffffu, (int)v, m);
}
static __device__ inline uint32_t lm_shfl_xor(uint32_t v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
static __device__ inline uint64_t lm_shfl_xor(uint64_t v, int m) {
  return (uint64_t)__shfl_xor_sync(0xffffffffu, (unsigned long long)v, m);
}
/* 16 bytes from p (16-byte aligned: the GEMV plan proves it of the index, buffers start 64-byte aligned) into
   out: one vector load on the GPU. The host shim's copy makes no alignment assumption. */
struct alignas(16) lm_vec16 {
  uint32_t w[4];
};
template <class T> static __device__ inline void lm_load16(const T* p, T* out) {
#ifdef __CUDA_ARCH__
  const lm_vec16 v = *reinterpret_cast<const lm_vec16*>(p);
#else
  lm_vec16 v;
  memcpy(&v, p, sizeof v);
#endif
  memcpy(out, &v, sizeof v);
}
template <class T, class F> static __device__ inline T lm_warp_fold(T v, F f) {
  for (int m = 16; m > 0; m >>= 1) v = f(v, lm_shfl_xor(v, m));
  return v;
}
template <class T, class F> static __device__ inline T lm_block_fold(T v, F f) {
  __shared__ T lm_partial[32];
  v = lm_warp_fold(v, f);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) lm_partial[threadIdx.x / 32] = v;
  __syncthreads();
  T r = lm_partial[0];
  for (unsigned w = 1; w < (blockDim.x + 31) / 32; w++) r = f(r, lm_partial[w]);
  return r;
}
/* V values per thread folded over a block of W warps at once, each value finished by one thread (V a power of
   two, at most 32): thread t < V gets value t's fold. In a warp, the two lanes of each pair swap halves of their
   values (the one whose lane has bit m set keeps the upper half), so after log2 V steps each lane holds one
   value's partial and V - 1 + 5 - log2 V shuffles have done what 5 V would value by value; then one word per
   warp and value in shared memory, two barriers in all, and each finishing thread folds its value over the
   warps in order. */
template <int V, int W, class T, class F> static __device__ inline T lm_block_fold_many_in(T (&v)[V], F f) {
  __shared__ T lm_parts[W * V];
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int half = V / 2, m = 16; half >= 1; half >>= 1, m >>= 1) {
    const bool upper = (lane & m) != 0;
#pragma unroll
    for (int i = 0; i < half; i++) v[i] = f(upper ? v[i + half] : v[i], lm_shfl_xor(upper ? v[i] : v[i + half], m));
  }
  for (int m = 16 / V; m > 0; m >>= 1) v[0] = f(v[0], lm_shfl_xor(v[0], m));
  __syncthreads();
  if (lane % (32 / V) == 0) lm_parts[threadIdx.x / 32 * V + lane / (32 / V)] = v[0];
  __syncthreads();
  const int own = threadIdx.x % V;
  T r = lm_parts[own];
  for (int w = 1; w < W; w++) r = f(r, lm_parts[w * V + own]);
  return r;
}
#define lm_block_fold_many(V, W, v, f) lm_block_fold_many_in<V, W>(v, f)
"""
)
