"""A CUDA graph captured for a shape bucket launches every kernel with the grid of the bucket's dims over an arena
sized for them, while the dims block D holds the live dims. Run that way through the host shim, every kernel kind
must compute exactly what an exact launch computes (compiler/gpu/kernels.py: blocks past the live grid return)."""

import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.runtime.cuda.buckets import bucket, round_up
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import CASES, MODELS, every_kind_symbolic

needs_gxx = pytest.mark.needs("g++")


def test_buckets_round_up_within_the_declared_range():
    assert [round_up(v, 1, 40) for v in (1, 2, 3, 5, 8, 9, 33, 40)] == [1, 2, 4, 8, 8, 16, 40, 40]
    assert round_up(3, 4, 100) == 4 and round_up(70, 1, 2**31 - 1) == 128
    assert bucket({"n": 9, "s": 3}, {"n": lm.sym("n", max=12), "s": lm.sym("s")}) == {"n": 12, "s": 4}


@pytest.fixture(scope="module")
def every_kind():
    g, _ = every_kind_symbolic(5)
    program = lm.compile(g, "h100")
    return g, program, ShimRuntime(buckets=True).load(program)


def test_every_kind_has_a_grid_that_depends_on_the_symbol(every_kind):
    _, program, _ = every_kind
    symbolic = {launch.shape for launch in launch_plan(program.kernels) if not launch.grid.is_const}
    assert symbolic == {"thread", "warp", "row", "gemm", "attention", "scatter"}


@needs_gxx
@pytest.mark.parametrize("n", [1, 5, 9, 40])  # buckets 1, 8, 16 and 40 (the symbol's max)
def test_every_kind_at_a_buckets_grid_matches_the_reference(every_kind, n):
    g, _, exe = every_kind
    _, feed = every_kind_symbolic(n)
    assert_matches(exe.run(feed), lm.run(g, feed))


@needs_gxx
@pytest.mark.parametrize("case", ["softmax_layernorm", "mlp", "encoder_block", "gpt2"])
def test_models_at_a_buckets_grid_match_the_reference(case):
    g, feed = {**CASES, **MODELS}[case]()
    assert_matches(ShimRuntime(buckets=True).load(lm.compile(g, "h100")).run(feed), lm.run(g, feed))
