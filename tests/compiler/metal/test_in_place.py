"""The paged decode step compiled for m2: each pool's scatter writes the donated pool in place (no copy launch,
compiler/kernels/in_place.py), and through the Metal shim two steps write the caller's own pool arrays (the same objects
come back, holding the new keys and values) and equal the reference interpreter's results bit for bit."""

import copy

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.kernels import ir
from luminal.compiler.metal.program import launch_plan
from luminal.runtime.metal.shim import MetalShimRuntime
from tests.compiler.metal.models import paged_feed, paged_step

needs_gxx = pytest.mark.needs("g++")


@pytest.fixture(scope="module")
def step():
    graph = paged_step()
    return graph, lm.compile(graph, "m2", cache=False)


def _pools(feed) -> list[str]:
    return [name for name in feed if name.startswith("pool.")]


def test_the_pools_scatters_write_the_inputs_with_no_copy_launch(step):
    graph, program = step
    kernels = program.kernels
    pools = {kernels.inputs[name] for name in graph.inputs if name.startswith("pool.")}
    assert {k.out for k in kernels.kernels if isinstance(k, ir.ScatterKernel)} == pools
    plan = launch_plan(kernels)
    scattering = [launch for launch in plan if launch.shape in ("scatter", "scatters")]  # one, merged: scatters
    assert {b for launch in scattering for b in launch.buffers[: launch.writes]} == pools
    assert "copy" not in [launch.shape for launch in plan]
    assert "_copy(" not in program.source  # no copy kernel is generated either
    undonated = copy.copy(graph)
    undonated.donated = {}
    copied = [launch.shape for launch in launch_plan(lm.compile(undonated, "m2", cache=False).kernels)]
    assert copied.count("copy") == len(pools)  # without the donation each pool is copied first


@needs_gxx
def test_two_steps_write_the_callers_pools_in_place(step):
    graph, program = step
    exe = MetalShimRuntime().load(program)
    feed = paged_feed(graph, [1, 5])
    pools = {name: feed[name] for name in _pools(feed)}
    for _ in range(2):
        old = {name: pool.copy() for name, pool in pools.items()}
        want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
        got = exe.run(feed)
        assert all(got[name] is pools[name] for name in pools)  # the caller's arrays, handed back
        for name, value in want.items():
            np.testing.assert_array_equal(got[name].astype(np.float32), value.astype(np.float32), err_msg=name)
        for name, pool in pools.items():  # the step's key or value landed at each row's slot, nothing else moved
            changed = (pool != old[name]).any(axis=(1, 3)).reshape(-1)  # [blocks * block] positions written
            assert set(np.flatnonzero(changed)) <= set(feed["slots"].reshape(-1).tolist()) and changed.any()
        feed["position_ids"], feed["slots"] = feed["position_ids"] + 1, feed["slots"] + 1  # one position on
