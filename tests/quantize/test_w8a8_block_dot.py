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

# A driver over whole matrices, as the kernel tiles them: `side` (4 or 1) weight rows by `side` activation rows while
# that many remain, the rest one at a time. The activation rows are copied into the rows the kernel packs
# (LM_Q8_ROW_BLOCKS blocks each) and prepared as it prepares them, and so are four weight rows for the 4-row dots.
# out[row * n + weight row].
DRIVER = """
#include <stdlib.h>
void lm_test_dot(int64_t kb, const int8_t* q, const float* s, int64_t n, const int8_t* a, const float* as,
                 int64_t rows, int64_t side, float* out) {
  const int8_t *ap[4], *qp[4], *pp[4];
  const float *asp[4], *sp[4];
  const int32_t* acp[4];
  float dot[16];
  const int64_t qs = 32 * LM_Q8_ROW_BLOCKS(kb), ql = LM_Q8_ROW_LANES(kb);
  int8_t* pa = malloc(rows * qs);
  int32_t* ac = malloc(sizeof(int32_t) * (rows * ql + 1));
  int8_t* qt = malloc(LM_Q8_PREPARED_BYTES(kb));
  for (int64_t r = 0; r < rows; r++) {
    memcpy(pa + r * qs, a + r * 32 * kb, 32 * kb);
    lm_q8_prepare_row(pa + r * qs, kb, ac + r * ql);
  }
  for (int64_t m0 = 0, mstep; m0 < rows; m0 += mstep) {
    mstep = rows - m0 >= side ? side : 1;
    for (int i = 0; i < mstep; i++) {
      ap[i] = pa + (m0 + i) * qs; asp[i] = as + (m0 + i) * kb; acp[i] = ac + (m0 + i) * ql;
    }
    for (int64_t n0 = 0, nstep; n0 < n; n0 += nstep) {
      nstep = n - n0 >= side ? side : 1;
      for (int w = 0; w < nstep; w++) { qp[w] = q + (n0 + w) * 32 * kb; sp[w] = s + (n0 + w) * kb; }
      if (nstep == 4) lm_q8_prepare_weights(kb, qp, qp, qt, pp);
      if (nstep == 4 && mstep == 4) lm_q8q8dot4x4(kb, pp, sp, ap, asp, acp, dot);
      else if (nstep == 4) lm_q8q8dot4x1(kb, pp, sp, ap, asp, acp, dot);
      else if (mstep == 4) lm_q8q8dot1x4(kb, qp, sp, ap, asp, acp, dot);
      else lm_q8q8dot1x1(kb, qp, sp, ap, asp, acp, dot);
      for (int w = 0; w < nstep; w++)
        for (int i = 0; i < mstep; i++) out[(m0 + i) * n + n0 + w] = dot[4 * w + i];
    }
  }
  free(pa), free(ac), free(qt);
}
"""
FORMS = {  # form -> (C compiler flags, /proc/cpuinfo flags it needs to run)
    "portable": ([], set()),
    "avx2": (["-mavx2", "-mfma"], {"avx2", "fma"}),
    "avx512-vnni": (
        ["-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vnni"],
        {"avx2", "fma", "avx512bw", "avx512dq", "avx512_vnni"},
    ),
    "avx-vnni": (["-mavx2", "-mfma", "-mavxvnni"], {"avx2", "fma", "avx_vnni"}),
}


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def data(n: int, rows: int, kb: int, rng) -> tuple[np.ndarray, ...]:
    """int8 values in [-127, 127] with the edge blocks: all +-127 (the largest pair sums), zeros, alternating."""
    q = rng.integers(-127, 128, (n, 32 * kb), dtype=np.int8)
    a = rng.integers(-127, 128, (rows, 32 * kb), dtype=np.int8)
    q[:, :32], a[:, :32] = 127, 127
    q[:, 32:64], a[: rows // 2, 32:64] = -127, 127
    a[rows // 2 :, 32:64] = -127
    q[:, 64:96] = 0
    a[:, 96:128] = np.where(np.arange(32) % 2, 127, -127)
    s = rng.random((n, kb), dtype=np.float32)
    sa = rng.random((rows, kb), dtype=np.float32)
    return q, s, a, sa


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_of_the_block_dot_is_the_exact_sum_whatever_shares_its_tile(form, tmp_path):
    """Against int64 block sums; an odd block count takes the AVX-512 form's half-width tail. Each result is the
    same bits in tiles of 4 x 4 as one at a time (batch invariance)."""
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
    pointer = lambda v: v.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    for rows, n, kb in ((7, 6, 5), (4, 4, 24), (1, 5, 7), (5, 9, 4)):
        q, s, a, sa = data(n, rows, kb, rng)
        out = {side: np.zeros((rows, n), np.float32) for side in (4, 1)}
        for side, got in out.items():
            args = (pointer(q), pointer(s), ctypes.c_int64(n), pointer(a), pointer(sa))
            dot(ctypes.c_int64(kb), *args, ctypes.c_int64(rows), ctypes.c_int64(side), pointer(got))
        sums = np.einsum(
            "ibj,nbj->inb", a.astype(np.int64).reshape(rows, kb, 32), q.astype(np.int64).reshape(n, kb, 32)
        )
        want = (sums * sa.astype(np.float64)[:, None, :] * s.astype(np.float64)[None]).sum(-1)
        np.testing.assert_allclose(out[4], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        np.testing.assert_array_equal(out[4], out[1])


def test_the_avx512_vnni_form_scales_each_blocks_exact_sum_once(tmp_path):
    """Up to 8 blocks (one group, whole or not): the AVX-512 VNNI form converts each block's exact int32 sum S_b
    once and adds S_b * (s_b * as_b), one rounding each, in its fixed tree (lm_q8_hsum8 over the lanes of blocks
    0 2 4 6 1 3 5 7), where a lane per 4 values, each scaled and rounded apart (the form before), rounded otherwise."""
    flags, needs = FORMS["avx512-vnni"]
    if not needs <= cpu_flags():
        pytest.skip(f"this CPU lacks {', '.join(sorted(needs - cpu_flags()))}")
    source = tmp_path / "dot.c"
    source.write_text("#include <stdint.h>\n#include <string.h>\n" + PRELUDE + DRIVER)
    output = tmp_path / "dot.so"
    subprocess.run([compiler(), "-O2", *flags, "-shared", "-fPIC", "-o", str(output), str(source)], check=True)
    dot = ctypes.CDLL(str(output)).lm_test_dot
    pointer = lambda v: v.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    rng = np.random.default_rng(1)
    for kb in (4, 5, 8):
        q, s, a, sa = data(6, 5, kb, rng)
        got = np.zeros((5, 6), np.float32)
        args = (pointer(q), pointer(s), ctypes.c_int64(6), pointer(a), pointer(sa))
        dot(ctypes.c_int64(kb), *args, ctypes.c_int64(5), ctypes.c_int64(4), pointer(got))
        sums = np.einsum(
            "ibj,nbj->inb", a.astype(np.int64).reshape(5, kb, 32), q.astype(np.int64).reshape(6, kb, 32)
        ).astype(np.float32)
        terms = np.zeros((5, 6, 8), np.float32)
        terms[..., :kb] = sums * (sa[:, None, :] * s[None])  # float32 products: each rounded once
        t = terms[..., [0, 2, 4, 6, 1, 3, 5, 7]]  # the lanes, in block order 0 2 4 6 1 3 5 7
        h = t[..., :4] + t[..., 4:]
        h = h[..., :2] + h[..., 2:]
        np.testing.assert_array_equal(got, h[..., 0] + h[..., 1])
