"""How the host shims run a block's GPU threads (runtime/host_fibers/lm_fibers.h): as fibers that switch at
barriers. Small hand-written CUDA kernels, built through the CUDA shim: barriers and shuffles order what they
must, a missing barrier shows the same wrong value every run, and threads that wait at different barriers end
the launch with an error instead of hanging."""

import ctypes
import platform
import signal
import subprocess
import sys

import numpy as np
import pytest

from luminal.runtime.cuda import shim

pytestmark = pytest.mark.needs("g++")

KERNELS = r"""
// Each block sums its 256 values: a warp's lanes by shuffles, then the 8 warps' sums through shared memory.
__global__ void block_sums(float* out, const float* x) {
  __shared__ float warp_sums[8];
  float v = x[blockIdx.x * 256 + threadIdx.x];
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < 8; w++) total += warp_sums[w];
    out[blockIdx.x] = total;
  }
}

// Each thread reads what its neighbour wrote to shared memory, with the barrier between or without it. (Not one
// template: g++ makes a template's static locals one object across every library loaded, as shared by the builds.)
__device__ void neighbours(int* out, int* written, bool barrier) {
  written[threadIdx.x] = 100 * blockIdx.x + threadIdx.x;
  if (barrier) __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = written[(threadIdx.x + 1) % 64];
  __syncthreads();  // the next block writes the same shared array
}
__global__ void neighbours_synced(int* out) {
  __shared__ int written[64];
  neighbours(out, written, true);
}
__global__ void neighbours_unsynced(int* out) {
  __shared__ int written[64];
  neighbours(out, written, false);
}

// Half the threads wait at a barrier the other half never reaches: a GPU hangs.
__global__ void divergent(int* out) {
  if (threadIdx.x < 32) __syncthreads();
  out[threadIdx.x] = 1;
}

// A thread's locals on its own stack: 64 KiB of them.
__global__ void large_locals(float* out) {
  float scratch[16384];
  for (int i = 0; i < 16384; i++) scratch[i] = (float)(i % 7) + threadIdx.x;
  float sum = 0.0f;
  for (int i = 0; i < 16384; i += 1024) sum += scratch[i];
  out[threadIdx.x] = sum;
}

// A block as large as a GPU allows, or larger: each warp's lanes sum their thread indices by shuffles.
__global__ void warp_index_sums(int* out) {
  int v = threadIdx.x;
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  __syncthreads();
  out[threadIdx.x] = v;
}

extern "C" int run_block_sums(float* out, const float* x, int blocks) {
  lm_launch(block_sums, blocks, 256, out, x);
  return lm_fibers_hung() ? 2 : 0;
}
extern "C" int run_neighbours(int* out, int barrier) {
  if (barrier) lm_launch(neighbours_synced, 2, 64, out); else lm_launch(neighbours_unsynced, 2, 64, out);
  return lm_fibers_hung() ? 2 : 0;
}
extern "C" int run_divergent(int* out) {
  lm_launch(divergent, 3, 64, out);
  return lm_fibers_hung() ? 2 : 0;
}
extern "C" int run_warp_index_sums(int* out, int threads) {
  lm_launch(warp_index_sums, 1, threads, out);
  return lm_fibers_hung() ? 2 : 0;
}
extern "C" int run_large_locals(float* out) {
  lm_launch(large_locals, 1, 128, out);
  return lm_fibers_hung() ? 2 : 0;
}
"""


@pytest.fixture(scope="module", params=["x86-64", "ucontext"] if platform.machine() == "x86_64" else ["ucontext"])
def lib(request) -> ctypes.CDLL:
    """The kernels built with each way the fibers can switch: x86-64's own, and POSIX contexts (elsewhere)."""
    defines = ("LM_FIBERS_UCONTEXT",) if request.param == "ucontext" else ()
    return ctypes.CDLL(str(shim.build_library(KERNELS, defines=defines)))


def pointer(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def test_shuffles_and_barriers_order_a_block_reduction(lib):
    x = np.random.default_rng(0).standard_normal(5 * 256).astype(np.float32)
    out = np.zeros(5, np.float32)
    assert lib.run_block_sums(pointer(out), pointer(x), 5) == 0
    np.testing.assert_allclose(out, x.reshape(5, 256).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_a_missing_barrier_reads_the_same_stale_value_every_run(lib):
    with_barrier = np.zeros(128, np.int32)
    assert lib.run_neighbours(pointer(with_barrier), 1) == 0
    threads = np.arange(64)
    expected = np.concatenate([(threads + 1) % 64, 100 + (threads + 1) % 64])
    np.testing.assert_array_equal(with_barrier, expected)

    last = threads == 63
    for _ in range(3):
        without = np.zeros(128, np.int32)
        assert lib.run_neighbours(pointer(without), 0) == 0
        # Thread t runs to its end before thread t + 1 starts, so it reads its neighbour's slot before the
        # write (what the block before left there), as it may on a GPU. Only each block's last thread, whose
        # neighbour is thread 0, reads the new value: the same threads wrong every run.
        np.testing.assert_array_equal(without == expected, np.concatenate([last, last]))


def test_the_run_in_reverse_takes_the_threads_last_first_too():
    """ShimRuntime(reversed_blocks=True)'s build: a missing barrier now hides where it showed and shows where it
    hid, so the two runs together catch a read of another thread's write in either direction."""
    lib = ctypes.CDLL(str(shim.build_library(KERNELS, reversed_blocks=True)))
    last = np.arange(64) == 63
    expected = np.concatenate([(np.arange(64) + 1) % 64, 100 + (np.arange(64) + 1) % 64])
    for _ in range(2):
        without = np.zeros(128, np.int32)
        assert lib.run_neighbours(pointer(without), 0) == 0
        np.testing.assert_array_equal(without == expected, ~np.concatenate([last, last]))


def test_threads_waiting_at_different_barriers_end_the_launch_with_an_error(lib):
    out = np.zeros(64, np.int32)
    assert lib.run_divergent(pointer(out)) == shim.HUNG
    with pytest.raises(RuntimeError, match="waited at different barriers"):
        shim.unless_hung(lib.run_divergent(pointer(out)))
    # The fibers left waiting are dropped: the next launch runs as usual.
    x = np.ones(256, np.float32)
    sums = np.zeros(1, np.float32)
    assert lib.run_block_sums(pointer(sums), pointer(x), 1) == 0
    assert sums[0] == 256.0


def test_a_thread_has_room_for_large_locals(lib):
    out = np.zeros(128, np.float32)
    assert lib.run_large_locals(pointer(out)) == 0
    expected = sum(float(i % 7) for i in range(0, 16384, 1024)) + 16 * np.arange(128, dtype=np.float32)
    np.testing.assert_allclose(out, expected)


def test_a_block_of_1024_threads_runs_and_a_larger_one_aborts(lib):
    """The fibers and a launch's barriers are fixed arrays of 1024, CUDA's and Metal's limit: the limit runs, and a
    launch past it stops the process (a GPU refuses it) instead of writing past the arrays."""
    out = np.zeros(1024, np.int32)
    assert lib.run_warp_index_sums(pointer(out), 1024) == 0
    np.testing.assert_array_equal(out, np.arange(1024).reshape(32, 32).sum(axis=1).repeat(32))
    script = (f"import ctypes, numpy as np; out = np.zeros(1025, np.int32); "
              f"ctypes.CDLL({lib._name!r}).run_warp_index_sums(ctypes.c_void_p(out.ctypes.data), 1025)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGABRT, done
