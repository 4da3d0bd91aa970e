"""Consecutive warp kernels over the same rows in one launch (compiler/gpu/warp_batch.py): a LayerNorm's mean and
variance, both read by two kernels, are one "warps" launch whose warps compute the mean, then the variance from
the mean they hold; a variance that reads another row's mean keeps its own launch; through the host shim (blocks
in either order, at a bucket's grid) every output is what the reference interpreter computes."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import planned_launches
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches

WIDTH = 300  # longer than a thread's reduction (launch.THREAD_STEPS): a warp per row


def _layer_norm(rows, swapped: bool) -> lm.Graph:
    """x's rows centred by their mean (or, `swapped`, by another row's mean), scaled by the variance; a second
    output reads the mean and the variance too, so both stay kernels of their own."""
    g = lm.Graph()
    x = g.input("x", (rows, WIDTH))
    mean = x.mean(-1, keepdim=True)
    if swapped:  # row r centred by the mean of row (r % 4) * 2 + r // 4
        mean_read = mean.reshape(2, 4, 1).permute(1, 0, 2).reshape(8, 1)
    else:
        mean_read = mean
    centered = x - mean_read
    var = (centered * centered).mean(-1, keepdim=True)
    (centered * (var + 1e-5).rsqrt()).output("normed")
    (x * mean + var).output("other")
    return g


CASES = {"rows": lambda: _layer_norm(lm.sym("rows", max=40), False), "swapped": lambda: _layer_norm(8, True)}


@pytest.fixture(scope="module", params=list(CASES))
def compiled(request):
    g = CASES[request.param]()
    return request.param, g, lm.compile(g, "h100", cache=False)


def test_the_mean_and_variance_are_one_launch_unless_another_rows_mean_is_read(compiled):
    case, _, program = compiled
    warp_launches = [(launch.shape, len(members)) for members, launch in planned_launches(program.kernels)]
    warp_launches = [w for w in warp_launches if w[0] in ("warp", "warps")]
    assert warp_launches == ([("warp", 1), ("warp", 1)] if case == "swapped" else [("warps", 2)])
    if case == "rows":  # the variance reads the mean from the local the warp holds, not from memory
        (source,) = [s for s in program.source.split("\n\n") if "_warps(" in s]
        mean = source.split("_q0[lm_flat] = ")[1].split(";")[0]
        assert source.count("_q0[") == 1 and mean in source.split("_q0[lm_flat]")[1]


@pytest.mark.needs("g++")
@pytest.mark.parametrize("shim", ["blocks_in_order", "blocks_reversed", "bucket_grid"])
def test_matches_the_reference(compiled, shim):
    _, g, program = compiled
    feed = {"x": np.random.default_rng(2).standard_normal((8, WIDTH)).astype(np.float32) * 3 + 1}
    runtime = ShimRuntime(reversed_blocks=shim == "blocks_reversed", buckets=shim == "bucket_grid")
    assert_matches(runtime.load(program).run(feed), lm.run(g, feed))


@pytest.mark.needs("nvcc")
def test_compiles_without_spills(compiled):
    _, _, program = compiled
    for u in nvcc.compile_cuda(program.source):
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"
