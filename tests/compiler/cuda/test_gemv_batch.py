"""Consecutive independent GEMVs in one launch (compiler/cuda/gemv_batch.py): q, k and v projections of one
normed vector run as one grid; through the host shim (blocks in either order, at a bucket's grid) every
output is what the reference interpreter computes; GEMVs that read one another's output, or whose output the
memory plan may place over what another reads, keep their launches."""

import shutil

import numpy as np
import pytest

import luminal as lm
from luminal.compiler import memory
from luminal.compiler.cuda.program import launch_plan, planned_launches
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the host shim needs g++ (C++20)")
K, WIDTHS = 64, {"q": 64, "k": 16, "v": 12}  # v's 12 outputs: its last block is the one block of a small grid


def _projections(rows) -> lm.Graph:
    """RMSNorm of `rows` rows, then three bf16 projections of it: a decode layer's q, k and v."""
    g = lm.Graph()
    x = g.input("x", (rows, K))
    scale = g.weight("norm", (K,))
    normed = x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt() * scale
    for name, n in WIDTHS.items():
        w = g.weight(name, (n, K), lm.bfloat16)
        (normed @ w.cast(lm.float32).t()).output(name)
    return bind_random(g)


def _feed(rows: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(5).standard_normal((rows, K)).astype(np.float32)}


@pytest.fixture(scope="module", params=["one_row", "rows"])
def projections(request):
    rows = 1 if request.param == "one_row" else lm.sym("batch", max=5)
    g = _projections(rows)
    return g, lm.compile(g, "h100", cache=False), 1 if request.param == "one_row" else 3


def test_the_three_projections_are_one_launch(projections):
    g, program, _ = projections
    plan = launch_plan(program.kernels)
    assert [launch.shape for launch in plan] == ["gemvs"]
    (merged,) = plan
    outs = {program.kernels.outputs[name][0] for name in WIDTHS}
    assert merged.writes == 3 and set(merged.buffers[:3]) == outs
    assert program.source.count("__shared__ float lm_x[") == 1  # the members stage their vectors in one array


@needs_gxx
@pytest.mark.parametrize("shim", ["blocks_in_order", "blocks_reversed", "bucket_grid"])
def test_matches_the_reference(projections, shim):
    g, program, rows = projections
    runtime = ShimRuntime(reversed_blocks=shim == "blocks_reversed", buckets=shim == "bucket_grid")
    feed = _feed(rows)
    assert_matches(runtime.load(program).run(feed), lm.run(g, feed))


@pytest.mark.skipif(not nvcc.available(), reason="nvcc is not installed: no CUDA toolkit here")
def test_compiles_without_spills(projections):
    _, program, _ = projections
    usages = nvcc.compile_cuda(program.source)
    assert {u.kernel for u in usages} == {launch_plan(program.kernels)[0].kernel}
    for u in usages:
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"


def _chain() -> lm.Graph:
    """t = x W0, then a = t W1 and b = x W2: a reads t, b does not."""
    g = lm.Graph()
    x = g.input("x", (1, K))
    t = x @ g.weight("w0", (K, K), lm.bfloat16).cast(lm.float32).t()
    (t @ g.weight("w1", (K, K), lm.bfloat16).cast(lm.float32).t()).output("a")
    (x @ g.weight("w2", (K, K), lm.bfloat16).cast(lm.float32).t()).output("b")
    return bind_random(g)


def test_a_gemv_reading_another_keeps_its_launch_and_so_does_one_that_may_overwrite_a_dead_read():
    """t's GEMV and a's read one another; b's output may lie where t lay (t's last reader is a's GEMV, which
    runs just before b's), so b's GEMV must not run beside a's: each keeps its launch."""
    g = _chain()
    program = lm.compile(g, "h100", cache=False)
    kernels = program.kernels
    assert [launch.shape for launch in launch_plan(kernels)] == ["gemv", "gemv", "gemv"]
    by_out = {k.out: k.name for k in kernels.kernels}
    t = next(k.out for k in kernels.kernels if k.out not in {buf for buf, _ in kernels.outputs.values()})
    spans = memory.lifetimes(kernels)
    b = kernels.outputs["b"][0]
    position = [k.name for k in kernels.kernels]
    assert spans[t].last == position.index(by_out[b]) - 1  # t is dead when b's GEMV starts: its bytes are free
    offsets = memory.plan(kernels, {}).offsets
    assert offsets[b] == offsets[t]  # and b's output takes them: run beside a's GEMV, b's would overwrite t


@needs_gxx
def test_the_chain_matches_the_reference_with_blocks_reversed():
    g = _chain()
    feed = {"x": np.random.default_rng(6).standard_normal((1, K)).astype(np.float32)}
    program = lm.compile(g, "h100", cache=False)
    assert_matches(ShimRuntime(reversed_blocks=True).load(program).run(feed), lm.run(g, feed))


def test_members_are_named_in_the_launch():
    g = _projections(1)
    ((members, launch),) = planned_launches(lm.compile(g, "h100", cache=False).kernels)
    assert launch.kernel == f"{members[0].name}_to_{members[-1].name}_gemvs" and len(members) == 3
