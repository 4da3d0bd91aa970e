"""How a GEMM's output is split into tasks (compiler/cpu/codegen_gemm.py `lm_gemm_chunks`): every chunk fits the
task's C tile (LM_MCP x LM_NCP panels), and the dynamic schedule's busiest thread gets within 1/16 of an even share
of the panel products (9 equal tasks on 2 threads ran as 5 and 4: 1/8 over), or of the best that splits up to 4x
finer than the coarsest reach, where no such split reaches an even share (the search stops there: 200 x 33 in
AVX2's 6 x 16 panels is 34 x 3 panels, and 8 threads would need rows split 11x finer for 13 panels each)."""

import ctypes

import pytest

from luminal.compiler.cpu import codegen_gemm
from luminal.runtime import cpu

HARNESS = (
    """
#include <stdint.h>
#include <string.h>
#include <omp.h>
"""
    + codegen_gemm.PRELUDE
    + """
int lm_tile_panels(void) { return LM_MCP * 1000 + LM_NCP; }
int lm_panel_rows(void) { return LM_MR * 1000 + LM_NR; }
void lm_chunks_for(int threads, int64_t nb, int64_t mp, int64_t np, int64_t* mt, int64_t* nt) {
  omp_set_num_threads(threads);
  lm_gemm_chunks(nb, mp, np, mt, nt);
}
"""
)


@pytest.fixture(scope="module")
def harness():
    lib = ctypes.CDLL(str(cpu.build_library(HARNESS)))
    lib.lm_chunks_for.argtypes = [ctypes.c_int] + [ctypes.c_int64] * 3 + [ctypes.POINTER(ctypes.c_int64)] * 2
    return lib


def busiest(nb: int, mp: int, np_: int, mt: int, nt: int, threads: int) -> int:
    """Panel products of the busiest thread when tasks go, in order, to whichever thread is least loaded (as the
    kernel's dynamic schedule hands them out), with rows and columns split as the kernel splits them."""
    mcp, ncp = -(-mp // mt), -(-np_ // nt)
    loads = [0] * threads
    for _ in range(nb):
        for r in range(mt):
            for c in range(nt):
                size = max(0, min(mcp, mp - r * mcp)) * max(0, min(ncp, np_ - c * ncp))
                loads[loads.index(min(loads))] += size
    return max(loads)


# (threads, batch, M, N): the encoder's linears at 1, 32, 128 and 1024 rows, batched attention-like products,
# and shapes off every grid.
CASES = [
    (t, nb, m, n)
    for t in (1, 2, 3, 4, 8)
    for nb, m, n in [(1, 1, 384), (1, 32, 1152), (1, 32, 384), (1, 128, 1152), (1, 128, 384), (1, 128, 1536),
                     (1, 1024, 384), (1, 1024, 1152), (12, 128, 128), (3, 37, 70), (1, 200, 33), (2, 13, 1000)]
]  # fmt: skip


@pytest.mark.parametrize("threads,nb,m,n", CASES)
def test_chunks_fit_the_tile_and_share_the_work_evenly(harness, threads, nb, m, n):
    mr, nr = divmod(harness.lm_panel_rows(), 1000)
    mcap, ncap = divmod(harness.lm_tile_panels(), 1000)
    mp, np_ = -(-m // mr), -(-n // nr)
    mt, nt = ctypes.c_int64(), ctypes.c_int64()
    harness.lm_chunks_for(threads, nb, mp, np_, ctypes.byref(mt), ctypes.byref(nt))
    assert 1 <= mt.value <= mp and 1 <= nt.value <= np_
    assert -(-mp // mt.value) <= mcap and -(-np_ // nt.value) <= ncap  # a chunk fits the task's C tile
    mt0, nt0 = -(-mp // mcap), -(-np_ // ncap)
    reachable = min(
        busiest(nb, mp, np_, m, n, threads)
        for m in range(mt0, min(mp, 4 * mt0) + 1)
        for n in range(nt0, min(np_, 4 * nt0) + 1)
    )
    even = max(-(-nb * mp * np_ // threads), reachable)
    assert 16 * busiest(nb, mp, np_, mt.value, nt.value, threads) <= 17 * max(
        even, -(-mp // mt.value) * -(-np_ // nt.value)
    )
