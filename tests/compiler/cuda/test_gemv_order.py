"""A kernel lowered between two GEMVs runs before the GEMVs ahead of it when it is independent of them
(compiler/gpu/gemv_order.py), so the GEMVs become one launch; one that reads a GEMV's output stays after it,
and the GEMVs after it move ahead of it instead; through the host shim the outputs are the reference
interpreter's either way."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan, planned_launches
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

K = 64


def _layer(between: str) -> lm.Graph:
    """q, k and v projections of one row, with a kernel built between q and k: of the input row alone
    ("independent") or of q ("reads_q")."""
    g = lm.Graph()
    x = g.input("x", (1, K))
    q = x @ g.weight("wq", (64, K)).t()
    q.output("q")
    side = (x.exp() + 1.0) if between == "independent" else (q.exp() + 1.0)
    side.output("side")
    for name, n in (("k", 16), ("v", 12)):
        (x @ g.weight(f"w{name}", (n, K)).t()).output(name)
    return bind_random(g)


@pytest.mark.parametrize("between", ["independent", "reads_q"])
def test_the_kernel_between_moves_only_when_independent(between):
    g = _layer(between)
    program = lm.compile(g, "h100", cache=False)
    kernels = program.kernels
    side = kernels.outputs["side"][0]
    lowered = [k.out for k in kernels.kernels]
    q, k = kernels.outputs["q"][0], kernels.outputs["k"][0]
    shapes = [launch.shape for launch in launch_plan(kernels)]
    if between == "independent":
        assert lowered.index(side) < lowered.index(q)
        assert shapes == ["thread", "gemvs"]
    else:  # it stays after q; k and v move ahead of it instead
        assert lowered.index(q) < lowered.index(k) < lowered.index(side)
        assert shapes == ["gemvs", "thread"]
    (merged,) = [members for members, launch in planned_launches(kernels) if launch.shape == "gemvs"]
    assert [m.out for m in merged] == [q, k, kernels.outputs["v"][0]]


@pytest.mark.needs("g++")
@pytest.mark.parametrize("between", ["independent", "reads_q"])
def test_matches_the_reference(between):
    g = _layer(between)
    feed = {"x": np.random.default_rng(3).standard_normal((1, K)).astype(np.float32)}
    program = lm.compile(g, "h100", cache=False)
    for reversed_blocks in (False, True):
        assert_matches(ShimRuntime(reversed_blocks=reversed_blocks).load(program).run(feed), lm.run(g, feed))
