"""Consecutive in-place scatters in one launch (compiler/gpu/scatter_batch.py): a thread scatters its value of
each; through the host shim (blocks in either order) the pools hold what the reference interpreter writes, in
the caller's arrays; scatters that read one another's output, or scatter another shape, keep their launches."""

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal import dtypes as dt
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.gpu.launch import Launch
from luminal.compiler.gpu.scatter_batch import merge_scatters
from luminal.compiler.kernels import ir
from luminal.hl import prim
from luminal.runtime.cuda.shim import ShimRuntime
from luminal.symbolic import as_expr, var
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches


def _pools_graph() -> lm.Graph:
    """Two donated pools (bf16 and float32), each written at the same three places from its own source."""
    g = lm.Graph()
    n = lm.sym("n", max=64)
    at = g.input("at", (3,), lm.int64)
    for name, dtype in (("key", lm.bfloat16), ("value", lm.float32)):
        pool = g.input(name, (n, 4), dtype)
        src = g.input(f"{name}_src", (3,))
        prim.scatter(pool, at, prim.cast(src * 2, dtype)).output(name)
        g.donate(name, name)
    return g


def _feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    feed = {"at": np.array([5, 0, 31])}
    for name, dtype in (("key", ml_dtypes.bfloat16), ("value", np.float32)):
        feed[name] = rng.standard_normal((8, 4)).astype(dtype)
        feed[f"{name}_src"] = rng.standard_normal(3).astype(np.float32)
    return feed


@pytest.fixture(scope="module")
def pools():
    g = _pools_graph()
    return g, lm.compile(g, "h100", cache=False)


def test_the_pools_scatters_are_one_launch(pools):
    _, program = pools
    plan = launch_plan(program.kernels)
    assert [launch.shape for launch in plan].count("scatters") == 1 and "scatter" not in [x.shape for x in plan]
    (merged,) = [launch for launch in plan if launch.shape == "scatters"]
    outs = {program.kernels.inputs[name] for name in ("key", "value")}
    assert merged.writes == 2 and set(merged.buffers[:2]) == outs


@pytest.mark.needs("g++")
@pytest.mark.parametrize("reversed_blocks", [False, True])
def test_matches_the_reference_in_the_callers_arrays(pools, reversed_blocks):
    g, program = pools
    feed = _feed()
    want = lm.run(g, {name: value.copy() for name, value in feed.items()})
    got = ShimRuntime(reversed_blocks=reversed_blocks).load(program).run(feed)
    assert_matches(got, want)
    assert got["key"] is feed["key"] and got["value"] is feed["value"]


@pytest.mark.needs("nvcc")
def test_compiles_without_spills(pools):
    _, program = pools
    for u in nvcc.compile_cuda(program.source):
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"


def _scatter(name: str, out: str, src_buffer: str, count: int = 3) -> tuple[tuple[ir.Kernel, ...], Launch]:
    i = var("_i0", 0, count - 1)
    k = ir.ScatterKernel(
        name, out, (as_expr(8),), ir.Load(out, var("_i0", 0, 7), dt.float32), (as_expr(count),),
        ir.Load("at", i, dt.int64), ir.Load(src_buffer, i, dt.float32), as_expr(8),
    )  # fmt: skip
    return (k,), Launch(f"{name}_scatter", "scatter", as_expr(1), 256, (out, out, "at", src_buffer))


def test_only_independent_scatters_of_one_shape_merge():
    a, b, c = _scatter("k0", "A", "s"), _scatter("k1", "B", "t"), _scatter("k2", "C", "u")
    assert [x.shape for _, x in merge_scatters([a, b, c])] == ["scatters"]
    reads_a = _scatter("k1", "B", "A")  # its source is what the first writes: it must run after it
    assert [x.shape for _, x in merge_scatters([a, reads_a, c])] == ["scatter", "scatters"]
    longer = _scatter("k1", "B", "t", count=5)
    assert [x.shape for _, x in merge_scatters([a, longer])] == ["scatter", "scatter"]
    again = _scatter("k1", "A", "t")  # the same pool twice: the later write must win
    assert [x.shape for _, x in merge_scatters([a, again])] == ["scatter", "scatter"]
