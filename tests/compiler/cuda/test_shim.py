"""The generated CUDA's meaning, checked on the CPU: each program compiled for h100 runs through the host shim
(the same source as C++20, every launch as the plan says, a block's threads as fibers with real barriers) and must
compute what the reference interpreter computes."""

import numpy as np
import pytest

import luminal as lm
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import CASES, MODELS

pytestmark = pytest.mark.needs("g++")


def check(g: lm.Graph, feed: dict) -> None:
    program = lm.compile(g, "h100", cache=False)
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(g, feed))


@pytest.mark.parametrize("case", [*CASES, *(m for m in MODELS if m not in CASES)])
def test_matches_the_reference(case):
    check(*{**CASES, **MODELS}[case]())


def test_symbolic_dims_are_bound_at_launch():
    g, feed = CASES["softmax_layernorm"]()
    program = lm.compile(g, "h100", cache=False)
    exe = ShimRuntime().load(program)
    for rows in (1, 12):
        x = np.random.default_rng(rows).standard_normal((rows, 200)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"x": x})["softmax"], lm.run(g, {"x": x})["softmax"], 1e-5, 1e-6)


def test_an_index_out_of_range_is_reported():
    g, feed = CASES["gather_scatter"]()
    feed["ids"] = feed["ids"].copy()
    feed["ids"][3] = 20
    with pytest.raises(IndexError, match="out of range"):
        ShimRuntime().load(lm.compile(g, "h100", cache=False)).run(feed)


def test_a_fresh_arena_holds_no_earlier_values():
    """Each new arena starts as bytes 0xFF (NaN), as device memory holds whatever was there, so a kernel reading
    what no kernel before it wrote fails the comparison even where numpy hands back the last run's freed memory."""
    g, feed = CASES["softmax_layernorm"]()
    program = lm.compile(g, "h100", cache=False)
    exe = ShimRuntime().load(program)
    arena = exe._arena({"rows": 7})
    assert arena and all((view.view(np.uint8) == 0xFF).all() for view in arena.values())
    assert_matches(exe.run(feed), lm.run(g, feed))
