"""An edge panel of two rows runs the two-row micro-kernel on AVX2 (compiler/cpu/codegen_gemm.py `lm_micro2`): it
writes those two rows of the C tile (the product, over one or two contraction blocks, odd and even depths) and
leaves the tile's next rows alone, where the 4-row kernel it replaces multiplied and stored two rows of padding."""

import ctypes

import numpy as np
import pytest

from luminal.compiler.cpu import codegen_gemm
from luminal.runtime import cpu

HARNESS = (
    "#include <stdint.h>\n#include <string.h>\n#include <omp.h>\n"
    + codegen_gemm.PRELUDE
    + """
int lm_shape(void) { return LM_MR * 1000 + LM_NR; }
void lm_edge(int64_t rows, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int first) {
  lm_micro_edge(rows, kc, a, b, c, ldc, first, b);
}
"""
)
LDC = 40  # the C tile's row stride: wider than a panel, as the kernel's tile is


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    flags = cpu.CFLAGS
    cpu.CFLAGS = flags + ["-mno-avx512f"]  # the AVX2 kernels, whatever this machine has
    try:
        lib = ctypes.CDLL(str(cpu.build_library(HARNESS)))
    finally:
        cpu.CFLAGS = flags
    lib.lm_edge.argtypes = [ctypes.c_int64, ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_int64, ctypes.c_int]
    return lib


@pytest.mark.parametrize("kc", [1, 2, 7, 256])
def test_two_row_edge_writes_its_rows_only(edge, kc):
    mr, nr = divmod(edge.lm_shape(), 1000)
    rng = np.random.default_rng(kc)
    a = np.zeros((kc, mr), np.float32)  # a k-major panel of which the first two rows are rows of A
    a[:, :2] = rng.standard_normal((kc, 2))
    b = rng.standard_normal((kc, nr)).astype(np.float32)
    c = np.full((mr, LDC), 7.0, np.float32)
    ptr = lambda x: x.ctypes.data  # noqa: E731
    edge.lm_edge(2, kc, ptr(a), ptr(b), ptr(c), LDC, 1)  # the first block stores
    np.testing.assert_allclose(c[:2, :nr], a[:, :2].T @ b, rtol=1e-5, atol=1e-5)
    edge.lm_edge(2, kc, ptr(a), ptr(b), ptr(c), LDC, 0)  # a later block adds
    np.testing.assert_allclose(c[:2, :nr], 2 * (a[:, :2].T @ b), rtol=1e-5, atol=1e-5)
    assert (c[2:] == 7.0).all() and (c[:2, nr:] == 7.0).all()  # no padding row or column was stored
