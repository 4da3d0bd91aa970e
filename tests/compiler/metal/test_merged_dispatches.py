"""A Metal program runs CUDA's merged launches as its dispatches (compiler/metal/program.py): a paged decode step
dispatches its GEMVs, scatters and attention as CUDA launches them, with no copy of the KV cache; a merged
dispatch binds at most Metal's buffer arguments; the memory plan keeps what a merged dispatch touches apart;
through the Metal shim the merged dispatches compute what the reference interpreter does."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.analysis import memory
from luminal.compiler.cuda.program import launch_plan as cuda_launch_plan
from luminal.compiler.kernels import ir
from luminal.compiler.metal.program import MAX_BUFFERS, launch_plan, launched_together, planned_launches
from luminal.runtime.metal.shim import MetalShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.metal.models import MODELS, paged_step

needs_gxx = pytest.mark.needs("g++")
COPIES = 20  # independent copies: 40 buffers, more than one Metal dispatch binds


def _gemvs(plan) -> list[int]:
    """GEMVs per GEMV launch or dispatch."""
    return [launch.writes for launch in plan if launch.shape in ("gemv", "gemvs")]


def test_the_paged_step_dispatches_its_gemvs_and_scatters_as_cuda_launches_them():
    graph = paged_step()
    metal = launch_plan(lm.compile(graph, "m2", cache=False).kernels)
    cuda = cuda_launch_plan(lm.compile(graph, "h100", cache=False).kernels)
    assert _gemvs(metal) == _gemvs(cuda) and any(n > 1 for n in _gemvs(metal))
    shapes = [launch.shape for launch in metal]
    assert shapes.count("scatters") == 1 and "scatter" not in shapes  # the key and value pools' in one
    # The attention reads the pools through the block table (compiler/gpu/attention_reads.py): no kernel
    # gathers the cache first (this step's keys are too few to split: flash decoding's test is test_shim.py's).
    assert "thread" not in shapes and "threads" not in shapes and "copy" not in shapes
    assert shapes.count("attention") == 1 and len(metal) == len(cuda)


def _copies() -> lm.Graph:
    g = lm.Graph()
    n = lm.sym("n", max=40)
    for j in range(COPIES):
        (g.input(f"x{j}", (n, 6)) * (j + 1)).permute(1, 0).output(f"y{j}")
    return g


def test_a_merged_dispatch_binds_at_most_metals_buffer_arguments():
    g = _copies()
    cuda = [launch.shape for launch in cuda_launch_plan(lm.compile(g, "h100", cache=False).kernels)]
    assert cuda == ["threads"]  # CUDA's parameters hold all 40 pointers
    planned = planned_launches(lm.compile(g, "m2", cache=False).kernels)
    assert [launch.shape for _, launch in planned] == ["threads", "threads"]
    assert all(len(launch.buffers) <= MAX_BUFFERS for _, launch in planned)
    assert sum(len(members) for members, _ in planned) == COPIES


@needs_gxx
def test_merged_dispatches_compute_what_the_reference_does():
    g = _copies()
    rng = np.random.default_rng(3)
    feed = {f"x{j}": rng.standard_normal((7, 6)).astype(np.float32) for j in range(COPIES)}
    exe = MetalShimRuntime().load(lm.compile(g, "m2", cache=False))
    assert_matches(exe.run(feed), lm.run(g, feed))


def test_the_memory_plan_keeps_what_a_merged_dispatch_touches_apart():
    """The concatenating decode step's key and value concatenations are one dispatch, and read what dies with
    them: planned by kernel order alone, one's output could take the memory of what the other reads."""
    g, _ = MODELS["llama_decode"]()
    program = lm.compile(g, "m2", cache=False).kernels
    together = launched_together(program)
    assert together
    plan = memory.plan(program, {s: max(int(program.symbols[s].hi), 1) for s in program.symbols}, together)
    for names in together:
        kernels = [k for k in program.kernels if k.name in names]
        touched = sorted({b for k in kernels for b in ir.buffers_read(k) | {k.out}} & plan.offsets.keys())
        spans = sorted((plan.offsets[b], plan.offsets[b] + plan.sizes[b]) for b in touched)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:])), names
