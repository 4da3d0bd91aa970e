"""The split-K GEMV (compiler/analysis/gemv_plan.py, compiler/gpu/gemv.py): which kernels take it and with what load
width, and that what it computes through the host shim is what the reference interpreter computes."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.analysis import gemv_plan
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.gpu import gemv, launch
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import GEMV_CASES, bind_random

needs_gxx = pytest.mark.needs("g++")

# Elements per weight load: 16 bytes where alignment is proven, else 1.
WIDTHS = {"gemv_bf16": 8, "gemv_f32": 4, "gemv_f16_odd_k": 1, "gemv_misaligned": 1, "gemv_int8": 16,
          "gemv_rows_f32": 4, "gemv_q8_0_rows": 16}  # fmt: skip
# The input vector in shared memory: where N is a multiple of the block's 4 outputs (300, 40, 48, 64; not 70, 37).
STAGED = {"gemv_bf16", "gemv_misaligned", "gemv_int8", "gemv_rows_f32", "gemv_q8_0_rows"}
# Rows a block computes per pass over its weight rows (launch.row_group): where there may be several, N is a
# multiple of 4 and the weight does not depend on the row; 0 where a block takes 4 consecutive outputs.
ROW_GROUPS = {"gemv_bf16": 4, "gemv_f32": 0, "gemv_f16_odd_k": 0, "gemv_misaligned": 0, "gemv_int8": 0,
              "gemv_rows_f32": 3, "gemv_q8_0_rows": 4}  # fmt: skip


def _gemv_kernels(program):
    kernels = {k.name: k for k in program.kernels.kernels}
    return [kernels[launch.kernel] for launch in launch_plan(program.kernels) if launch.shape == "gemv"]


@pytest.mark.parametrize("case", GEMV_CASES)
def test_the_linear_layer_is_one_gemv_with_the_expected_load_width(case):
    g, _ = GEMV_CASES[case]()
    program = lm.compile(g, "h100", cache=False)
    (kernel,) = _gemv_kernels(program)
    assert gemv_plan.plan(kernel).width == WIDTHS[case]
    assert ("lm_load16(&" in program.source) == (WIDTHS[case] > 1)
    assert gemv.staged(kernel, gemv_plan.plan(kernel)) == (case in STAGED)
    assert ("__shared__ float lm_x[" in program.source) == (case in STAGED)
    assert launch.row_group(kernel, gemv_plan.plan(kernel)) == ROW_GROUPS[case]


def test_rows_sharing_a_weight_take_a_block_per_outputs_of_n_whatever_the_rows():
    """The grid of a GEMV over a symbol's rows covers N alone: each weight row is read by one block."""
    g, _ = GEMV_CASES["gemv_q8_0_rows"]()
    (grid,) = [x.grid for x in launch_plan(lm.compile(g, "h100", cache=False).kernels) if x.shape == "gemv"]
    assert grid.is_const and grid.value == 40 // launch.GEMV_ROWS


@needs_gxx
@pytest.mark.parametrize("case", GEMV_CASES)
def test_matches_the_reference(case):
    g, feed = GEMV_CASES[case]()
    assert_matches(ShimRuntime().load(lm.compile(g, "h100", cache=False)).run(feed), lm.run(g, feed))


@needs_gxx
def test_at_a_buckets_grid_matches_the_reference():
    g, feed = GEMV_CASES["gemv_bf16"]()
    assert_matches(ShimRuntime(buckets=True).load(lm.compile(g, "h100", cache=False)).run(feed), lm.run(g, feed))


def test_a_large_float32_matmul_stays_a_tiled_gemm():
    g = lm.Graph()
    x, w = g.input("x", (64, 128)), g.weight("w", (70, 128))
    (x @ w.t()).output("out")
    program = lm.compile(bind_random(g), "h100", cache=False)
    assert [launch.shape for launch in launch_plan(program.kernels)] == ["gemm"]


def test_a_rows_own_sum_is_no_gemv():
    g = lm.Graph()
    x = g.input("x", (4, 512))
    (x * x).sum(-1).output("out")
    program = lm.compile(g, "h100", cache=False)
    assert "gemv" not in {launch.shape for launch in launch_plan(program.kernels)}


@needs_gxx
def test_a_float64_gemv_sums_in_double():
    """A float64 matrix-vector product (a permuted operand makes it a GEMV) accumulates and folds in double."""
    import luminal.functional as F

    g = lm.Graph()
    a, b = g.input("a", (3, 70, 4), lm.float64), g.input("b", (9, 70), lm.float64)
    F.matmul(a.permute(0, 2, 1), b.permute(1, 0)).output("y")
    program = lm.compile(g, "h100", cache=False)
    assert [launch.shape for launch in launch_plan(program.kernels)] == ["gemv"]
    rng = np.random.default_rng(0)
    feed = {"a": rng.standard_normal((3, 70, 4)), "b": rng.standard_normal((9, 70))}
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(g, feed))
