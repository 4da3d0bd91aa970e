// Stand-ins for the CUDA built-ins that generated kernels use, so that the same source compiles as C++20 and
// runs on the CPU (runtime/cuda/shim.py force-includes this header). A launch runs its blocks one after another,
// each block's `blockDim.x` threads as fibers on the launching CPU thread (lm_fibers.h): __syncthreads is a
// barrier over the block, a warp shuffle is an exchange through a per-warp array between two barriers over the
// warp (so all 32 lanes must take part, as a full-mask shuffle requires on a GPU), and a static __shared__ array
// is the running block's shared memory. The wmma API of tensor cores has its stand-in in mma.h.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#ifdef LM_SHIM_REVERSED_BLOCKS  // the run in reverse (shim.py reversed_blocks): each block's threads last first too
#define LM_FIBERS_LAST_FIRST 1
#endif
#include "lm_fibers.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline thread_local uint3 threadIdx, blockIdx;

// Generated code checks its vector accesses' alignment here, which a GPU requires and a CPU does not.
#define LM_HOST_SHIM 1
inline void lm_shim_check_aligned(const void* p, unsigned bytes) {
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    std::fprintf(stderr, "host shim: a %u-byte vector access at %p is misaligned (a GPU faults)\n", bytes, p);
    std::abort();
  }
}
inline dim3 blockDim, gridDim;

inline thread_local lm_fiber_block* lm_shim_current;  // the running launch's

inline void __syncthreads() { lm_fiber_wait(lm_shim_current->all); }

template <class T> T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "a shuffle moves at most 8 bytes");
  lm_fiber_block& launch = *lm_shim_current;
  const unsigned self = threadIdx.x, warp = self / 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  launch.exchange[self] = bits;
  lm_fiber_wait(launch.groups[warp]);  // every lane has written
  bits = launch.exchange[warp * 32 + ((self % 32) ^ (unsigned)lane_mask)];
  lm_fiber_wait(launch.groups[warp]);  // every lane has read before any writes again
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// Device-wide memory order. The blocks of a launch run one after another here, so an atomic read-modify-write
// and a fence need only be what they are on one CPU; a "last block" count (compiler/cuda/arrivals.py) sees every
// earlier block's arrival. GCC's built-ins, not <atomic>: that header alone doubled a small program's build.
inline int atomicAdd(int* address, int value) { return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T> T __ldcg(const T* address) { return *address; }  // a load past L1: a plain one on a CPU

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

// kernel<<<blocks, threads>>>(args...): the blocks in order (or last first), each one's threads as fibers.
template <class... Params, class... Args>
void lm_launch(void (*kernel)(Params...), int64_t blocks, unsigned threads, Args... args) {
  gridDim = dim3{(unsigned)blocks, 1, 1};
  blockDim = dim3{threads, 1, 1};
  lm_fiber_block launch(threads);
  lm_shim_current = &launch;
  auto run = [&](unsigned) { kernel(args...); };
  for (int64_t b = 0; b < blocks; b++) {
#ifdef LM_SHIM_REVERSED_BLOCKS  // a GPU promises no order: a test runs the blocks last first
    blockIdx = uint3{(unsigned)(blocks - 1 - b), 0, 0};
#else
    blockIdx = uint3{(unsigned)b, 0, 0};
#endif
    if (!lm_fibers_run(threads, run, [](unsigned t) { threadIdx = uint3{t, 0, 0}; })) return;
  }
}
