"""Consecutive GEMVs in one launch (compiler/gpu/gemv_batch.py): q, k and v projections of one normed vector
run as one grid; an MLP's up projection, whose epilogue multiplies by silu of the gate projection at its own
outputs, runs after the gate in the same blocks; through the host shim (blocks in either order, at a bucket's
grid) every output is what the reference interpreter computes; GEMVs that read one another's output elsewhere
than at their own positions, or whose output the memory plan may place over what another reads, keep their
launches."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.analysis import memory
from luminal.compiler.cuda.program import kernel_launches, launch_plan, planned_launches
from luminal.compiler.gpu import gemv_batch
from luminal.compiler.gpu.launch import GEMV_ROW_GROUP
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

needs_gxx = pytest.mark.needs("g++")
K, WIDTHS = 64, {"q": 64, "k": 16, "v": 12}  # parts of 16, 4 and 3 blocks (4 outputs a block)


def _normed(g: lm.Graph, rows) -> lm.Tensor:
    """RMSNorm of input x's `rows` rows."""
    x = g.input("x", (rows, K))
    return x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt() * g.weight("norm", (K,))


def _projections(rows) -> lm.Graph:
    """RMSNorm of `rows` rows, then three bf16 projections of it: a decode layer's q, k and v."""
    g = lm.Graph()
    normed = _normed(g, rows)
    for name, n in WIDTHS.items():
        w = g.weight(name, (n, K), lm.bfloat16)
        (normed @ w.cast(lm.float32).t()).output(name)
    return bind_random(g)


def _feed(rows: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(5).standard_normal((rows, K)).astype(np.float32)}


def _compiled(build, rows: str):
    """(graph, program, rows fed): `build` at one row, or over a symbol's rows fed 3."""
    g = build(1 if rows == "one_row" else lm.sym("batch", max=5))
    return g, lm.compile(g, "h100", cache=False), 1 if rows == "one_row" else 3


@pytest.fixture(scope="module", params=["one_row", "rows"])
def projections(request):
    return _compiled(_projections, request.param)


def test_the_three_projections_are_one_launch(projections):
    g, program, _ = projections
    plan = launch_plan(program.kernels)
    assert [launch.shape for launch in plan] == ["gemvs"]
    (merged,) = plan
    outs = {program.kernels.outputs[name][0] for name in WIDTHS}
    assert merged.writes == 3 and set(merged.buffers[:3]) == outs
    assert program.source.count("__shared__ float lm_x[") == 1  # the members stage their vectors in one array


def _check(compiled, shim: str) -> None:
    g, program, rows = compiled
    runtime = ShimRuntime(reversed_blocks=shim == "blocks_reversed", buckets=shim == "bucket_grid")
    feed = _feed(rows)
    assert_matches(runtime.load(program).run(feed), lm.run(g, feed))


SHIMS = ["blocks_in_order", "blocks_reversed", "bucket_grid"]


@needs_gxx
@pytest.mark.parametrize("shim", SHIMS)
def test_matches_the_reference(projections, shim):
    _check(projections, shim)


@pytest.mark.needs("nvcc")
def test_compiles_without_spills(projections):
    _, program, _ = projections
    usages = nvcc.compile_cuda(program.source)
    assert {u.kernel for u in usages} == {launch_plan(program.kernels)[0].kernel}
    for u in usages:
        assert u.spill_bytes == 0, f"{u.kernel} spills {u.spill_bytes} bytes on sm_{u.arch}"


def _mlp(rows, up_width: int = 32) -> lm.Graph:
    """silu(x Wg) * (x Wu) of a normed x, and x Wg: the gate's output read by the up projection's epilogue."""
    g = lm.Graph()
    x = _normed(g, rows)
    gate = x @ g.weight("gate", (32, K), lm.bfloat16).cast(lm.float32).t()
    up = x @ g.weight("up", (up_width, K), lm.bfloat16).cast(lm.float32).t()
    gate.output("gate")  # stored: the up projection's epilogue reads it, not a second sum of its own
    (F.silu(gate)[:, :up_width] * up).output("y")
    return bind_random(g)


@pytest.fixture(scope="module", params=["one_row", "rows"])
def mlp(request):
    return _compiled(_mlp, request.param)


def test_the_up_projection_runs_after_the_gate_in_its_blocks(mlp):
    """In one pass (one row) the up projection reads the normed row the gate staged; row groups stage each
    pass's rows, so there each member stages its own."""
    _, program, rows = mlp
    ((members, launch),) = planned_launches(program.kernels)
    assert launch.shape == "gemvs" and len(members) == 2
    (gate_grid,) = {str(x.grid) for m in members for x in kernel_launches(m, program.kernels)}
    assert str(launch.grid) == gate_grid  # one part: the same blocks, not a grid each
    assert gemv_batch.shares_staging(*members) == (rows == 1)
    stores = [line for line in program.source.splitlines() if line.strip().startswith("lm_x[")]
    assert len(stores) == (1 if rows == 1 else 2 * GEMV_ROW_GROUP)


@needs_gxx
@pytest.mark.parametrize("shim", SHIMS)
def test_the_mlp_matches_the_reference(mlp, shim):
    _check(mlp, shim)


@needs_gxx
def test_a_gate_read_at_other_positions_keeps_its_launch():
    """The up projection is narrower than the gate: it reads the gate's rows at another stride, which other
    blocks write, so the two stay apart."""
    g = _mlp(lm.sym("batch", max=5), up_width=16)
    program = lm.compile(g, "h100", cache=False)
    assert "gemvs" not in [launch.shape for launch in launch_plan(program.kernels)]
    feed = _feed(3)
    assert_matches(ShimRuntime(reversed_blocks=True).load(program).run(feed), lm.run(g, feed))


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
