"""What the CUDA runtime decides without a device: where each buffer of a bucket lives, which launches run at
which grids, and how inputs split into host and device arrays."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import luminal as lm
from luminal.compiler.analysis import memory
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.gpu.launch import Launch
from luminal.runtime.cuda import arrays
from luminal.runtime.cuda.layout import launches_at, layout
from tests.compiler.cuda.graphs import every_kind_symbolic


@pytest.fixture(scope="module")
def program():
    return lm.compile(every_kind_symbolic(5)[0], "h100").kernels


def test_inputs_get_slots_of_their_own_beside_the_plan(program):
    env = {"n": 8}
    placed = layout(program, env)
    plan = memory.plan(program, env)
    inputs = set(program.inputs.values())
    assert set(placed.offsets) == set(plan.offsets) | inputs
    assert all(placed.offsets[b] == plan.offsets[b] for b in plan.offsets)  # the memory plan, unchanged
    assert all(placed.offsets[b] >= plan.arena_bytes for b in inputs)
    spans = sorted((placed.offsets[b], placed.offsets[b] + placed.sizes[b]) for b in inputs)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))  # input slots are disjoint
    assert all(off % memory.ALIGN == 0 for off in placed.offsets.values()) and placed.total >= spans[-1][1]
    x = program.inputs["long"]
    assert placed.sizes[x] == 8 * 300 * 4  # sized for the bucket's dims


def test_a_bigger_bucket_needs_more_room(program):
    assert layout(program, {"n": 16}).total > layout(program, {"n": 8}).total


def test_launches_at_the_dims_skip_empty_grids(program):
    plan = launch_plan(program)
    at = {launch.kernel: blocks for launch, blocks in launches_at(plan, {"n": 40})}
    assert len(at) == len(plan) and all(blocks > 0 for blocks in at.values())
    gemm = next(launch for launch in plan if launch.shape == "gemm")
    assert at[gemm.kernel] == -(-70 * 40 // 64) * 2  # rows (batch folded in) x columns, in 64 x 64 tiles
    empty = Launch("k_empty", "thread", lm.sym("n") - 1, 256, ("b0",))
    assert [launch.kernel for launch, _ in launches_at([*plan, empty], {"n": 1})] == [x.kernel for x in plan]


def test_inputs_split_into_host_and_device_arrays():
    class DeviceArray:  # what a CuPy array or a CUDA torch tensor says about itself
        shape, dtype = (3, 4), np.dtype(np.float32)

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    cpu_tensor = torch.arange(6, dtype=torch.float32)
    host, device, shapes = arrays.split(
        {"a": np.ones(2), "t": cpu_tensor, "l": [1, 2], "d": DeviceArray()}, to_device=lambda x: x
    )
    assert set(host) == {"a", "t", "l"} and set(device) == {"d"}
    assert np.shares_memory(host["t"], cpu_tensor.numpy())  # a CPU tensor is read in place
    assert shapes["d"].shape == (3, 4) and shapes["d"].dtype == np.float32 and shapes["d"].base.nbytes == 4


def test_importing_the_runtime_imports_no_cupy():
    """Checked in a fresh interpreter (meaningful where CuPy is installed: it is imported only by a load)."""
    code = "import sys, luminal.runtime.cuda.executable, luminal.runtime.cuda.shim; assert 'cupy' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
