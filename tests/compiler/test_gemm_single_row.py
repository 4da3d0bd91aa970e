"""A GEMM whose last row panel holds a single row (a decode step's batch of one) runs the one-row micro-kernel
(compiler/cpu/codegen_gemm.py `lm_micro_row`), and one whose last panel holds fewer rows than a panel a kernel of 4 or
8 rows (`lm_micro_edge`): each must give what the interpreter gives, whether A is read in place or packed, with an
odd contraction (the kernel's leftover k) over several contraction blocks, under both micro-kernel shapes (6x16
and 12x32) and at every row count up to two panels of 12 and one more."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.runtime import cpu

RNG = np.random.default_rng(5)
K, N = 523, 70  # 523: three contraction blocks and an odd last one


def _graph() -> lm.Graph:
    g = lm.Graph()
    rows = lm.sym("rows", max=32)
    x, xt = g.input("x", (rows, K)), g.input("xt", (K, rows))
    w, bias = g.weight("w", (N, K)), g.weight("bias", (N,))
    g.bind({
        "w": (RNG.standard_normal((N, K)) / np.sqrt(K)).astype(np.float32),
        "bias": RNG.standard_normal(N).astype(np.float32),
    })  # fmt: skip
    F.silu(F.linear(x, w, bias)).output("direct")  # A read in place, a fused epilogue after the row kernel
    (F.transpose(xt, 0, 1) @ F.transpose(w, 0, 1)).output("packed")  # A packed in panels
    return g


@pytest.mark.parametrize("flags", [[], ["-mno-avx512f"]], ids=["native", "avx2-tile"])
def test_one_row_and_edge_panels_match_the_interpreter(monkeypatch, tmp_path, flags):
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "CFLAGS", cpu.CFLAGS + flags)
    g = _graph()
    prog = lm.compile(g, "cpu", cache=False)
    assert prog.source.count("lm_micro_row(lm_kl") == 2  # both readings of A have the one-row path
    assert prog.source.count("lm_micro_edge(lm_M") == 2  # and the edge-panel kernels
    for rows in range(1, 26):  # every remainder of a panel of 6 and of 12
        x = RNG.standard_normal((rows, K)).astype(np.float32)
        feed = {"x": x, "xt": np.ascontiguousarray(x.T)}
        got, want = prog.run(feed), lm.run(g, feed)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4, err_msg=f"{rows} rows: {name}")
