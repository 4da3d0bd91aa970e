"""GEMMs of one input that read copies of their weights (Metal's SIMT GEMM reads transposed copies) run as one
GEMM over side-by-side weights computed from the weights themselves (compiler/gpu/sibling_gemms.py): the
copies go, the side-by-side weights keep the layout the GEMMs read ([K, N] or [N, K]) and are made at load, and
through the Metal shim the outputs are the reference interpreter's."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.kernels import ir
from luminal.compiler.kernels.derived_weights import ROLE
from luminal.compiler.metal.program import launch_plan, load_plan
from luminal.runtime.metal.shim import MetalShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

ROWS = lm.sym("m", max=512)  # GEMMs tiled, not GEMVs
K = 48


def projections(k_major: bool) -> lm.Graph:
    """A query, key and value projection of one input, each over a copy of its weight (sin(w / 2): a kernel over
    the weight alone), the copy [K, N] (`k_major`) or [N, K]."""
    g = lm.Graph()
    h = g.input("x", (ROWS, K)) * 2.0
    out = []
    for name, width in (("q", 64), ("k", 32), ("v", 32)):
        if k_major:
            out.append(h @ (g.weight(f"w{name}", (K, width)) * 0.5).sin())
        else:
            out.append(h @ (g.weight(f"w{name}", (width, K)) * 0.5).sin().t())
    q, k, v = out
    (q.reshape((ROWS, 2, 32)) * k.reshape((ROWS, 1, 32)) + v.reshape((ROWS, 1, 32))).output("y")
    return bind_random(g)


@pytest.mark.parametrize("k_major", [True, False], ids=["k_major", "n_major"])
def test_the_key_and_value_gemms_are_one_over_side_by_side_weights_in_the_layout_they_read(k_major):
    p = lm.compile(projections(k_major), "m2", cache=False).kernels
    assert [launch.shape for launch in launch_plan(p)].count("gemm") == 2  # q's, and k's and v's as one
    (merged,) = [k for k in p.kernels if k.name.endswith("_weights")]
    assert tuple(int(d.evaluate({})) for d in merged.shape) == ((K, 64) if k_major else (64, K))
    assert ir.buffers_read(merged) == {p.weights["wk"], p.weights["wv"]}  # computed from the weights themselves
    assert p.buffers[merged.out].role == ROLE and any(merged.name in launch.kernel for launch in load_plan(p))
    gemms = [k for k in p.kernels if isinstance(k, ir.LoopKernel) and merged.out in ir.buffers_read(k)]
    assert len(gemms) == 1 and all(p.weights[w] not in ir.buffers_read(gemms[0]) for w in ("wk", "wv"))
    readers = {b for k in p.kernels for b in ir.buffers_read(k)}
    copies = [k.name for k in p.kernels if ir.buffers_read(k) & {p.weights["wk"], p.weights["wv"]}]
    assert copies == [merged.name] and merged.out in readers  # no copy of the key's or value's weight is left


@pytest.mark.needs("g++")
@pytest.mark.parametrize("k_major", [True, False], ids=["k_major", "n_major"])
def test_matches_the_reference(k_major):
    g = projections(k_major)
    loaded = MetalShimRuntime().load(lm.compile(g, "m2", cache=False))
    for rows in (3, 70):
        feed = {"x": np.random.default_rng(rows).standard_normal((rows, K)).astype(np.float32)}
        assert_matches(loaded.run(feed), lm.run(g, feed))
