"""The int8 x int8 block dot of the W8A8 kernel (compiler/cpu/codegen_w8a8.py) in each form the C compiler may
pick: portable C, AVX2's vpmaddubsw + vpmaddwd, and the VNNI forms, against exact integer sums. A form this CPU
cannot run is only compiled."""

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from luminal.compiler.cpu.codegen_w8a8 import PRELUDE
from luminal.runtime.cpu import compiler

# A driver over whole rows: groups of 4 rows through the 4-row dot, the rest one at a time (as the kernel does).
DRIVER = """
void lm_test_dot(int64_t kb, const int8_t* q, const float* s, const int8_t* a, const float* as, int64_t rows,
                 float* out) {
  const int8_t* ap[4];
  const float* sp[4];
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    for (int i = 0; i < 4; i++) { ap[i] = a + (r + i) * 32 * kb; sp[i] = as + (r + i) * kb; }
    lm_q8q8dot4(kb, q, s, ap, sp, out + r);
  }
  for (; r < rows; r++) {
    ap[0] = a + r * 32 * kb; sp[0] = as + r * kb;
    lm_q8q8dot1(kb, q, s, ap, sp, out + r);
  }
}
"""
FORMS = {  # form -> (C compiler flags, /proc/cpuinfo flags it needs to run)
    "portable": ([], set()),
    "avx2": (["-mavx2", "-mfma"], {"avx2", "fma"}),
    "avx512-vnni": (
        ["-mavx2", "-mfma", "-mavx512f", "-mavx512vl", "-mavx512vnni"],
        {"avx2", "avx512vl", "avx512_vnni"},
    ),
    "avx-vnni": (["-mavx2", "-mfma", "-mavxvnni"], {"avx2", "fma", "avx_vnni"}),
}


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def data(rows: int, kb: int, rng) -> tuple[np.ndarray, ...]:
    """int8 values in [-127, 127] with the edge blocks: all +-127 (the largest pair sums), zeros, alternating."""
    q = rng.integers(-127, 128, 32 * kb, dtype=np.int8)
    a = rng.integers(-127, 128, (rows, 32 * kb), dtype=np.int8)
    q[:32], a[:, :32] = 127, 127
    q[32:64], a[: rows // 2, 32:64] = -127, 127
    a[rows // 2 :, 32:64] = -127
    q[64:96] = 0
    a[:, 96:128] = np.where(np.arange(32) % 2, 127, -127)
    s = rng.random(kb, dtype=np.float32)
    sa = rng.random((rows, kb), dtype=np.float32)
    return q, s, a, sa


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_of_the_block_dot_is_the_exact_sum(form, tmp_path):
    flags, needs = FORMS[form]
    source = tmp_path / "dot.c"
    source.write_text("#include <stdint.h>\n#include <string.h>\n" + PRELUDE + DRIVER)
    runs = needs <= cpu_flags()
    output = tmp_path / ("dot.so" if runs else "dot.o")
    link = ["-shared", "-fPIC"] if runs else ["-c"]
    subprocess.run([compiler(), "-O2", *flags, *link, "-o", str(output), str(source)], check=True, capture_output=True)
    if not runs:
        pytest.skip(f"compiled only: this CPU lacks {', '.join(sorted(needs - cpu_flags()))}")
    dot = ctypes.CDLL(str(output)).lm_test_dot
    rng = np.random.default_rng(0)
    for rows, kb in ((7, 4), (4, 24), (1, 5)):
        q, s, a, sa = data(rows, kb, rng)
        out = np.zeros(rows, np.float32)
        pointer = lambda v: v.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        dot(ctypes.c_int64(kb), pointer(q), pointer(s), pointer(a), pointer(sa), ctypes.c_int64(rows), pointer(out))
        sums = (a.astype(np.int64).reshape(rows, kb, 32) * q.astype(np.int64).reshape(kb, 32)).sum(-1)
        want = (sums * sa.astype(np.float64) * s.astype(np.float64)).sum(-1)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
