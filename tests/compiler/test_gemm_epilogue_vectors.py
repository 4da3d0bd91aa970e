"""A GEMM's epilogue runs in vector lanes: a linear layer's GELU (its erf calls exp2f per element) must reach
glibc's vector exp2f, not the scalar one per element (compiler/cpu/codegen_gemm.py `_columns`: the column index
written as the tile's column itself, so the C compiler sees contiguous reads and stores). Measured: the encoder's
128x384x1536 linear with GELU went from 41 to 100 GFLOP/s on one AMD EPYC thread."""

import shutil
import subprocess

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.runtime import cpu

RNG = np.random.default_rng(7)


def _undefined_symbols(library) -> set[str]:
    listed = subprocess.run(["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in listed.stdout.splitlines() if line.strip()}


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils' nm to list the library's imports")
@pytest.mark.parametrize("batch", [None, 4], ids=["static", "symbolic-batch"])
def test_gelu_epilogue_calls_the_vector_exp2f(monkeypatch, tmp_path, batch):
    if not cpu.vector_math_flags(cpu.compiler()):
        pytest.skip("no libmvec here: every exp2f is the scalar one")
    monkeypatch.setenv("LUMINAL_CACHE_DIR", str(tmp_path))
    g = lm.Graph()
    rows = lm.sym("b", max=8) if batch else 1
    x = g.input("x", (rows, 37, 96))
    w, bias = g.weight("w", (200, 96)), g.weight("bias", (200,))
    g.bind(
        {
            "w": (RNG.standard_normal((200, 96)) / 10).astype(np.float32),
            "bias": RNG.standard_normal(200).astype(np.float32),
        }
    )
    F.gelu(F.linear(x, w, bias)).output("y")
    prog = lm.compile(g, "cpu", cache=False)
    assert prog.report["kernels"]["gemm"] == 1 and len(prog.kernels.kernels) == 1  # GELU is the GEMM's epilogue
    imports = _undefined_symbols(cpu.build_library(prog.source))
    assert any(s.startswith("_ZGV") and s.endswith("_exp2f") for s in imports), sorted(imports)
    feed = {"x": RNG.standard_normal((batch or 1, 37, 96)).astype(np.float32)}
    np.testing.assert_allclose(prog.run(feed)["y"], lm.run(g, feed)["y"], rtol=1e-4, atol=1e-4)
