"""Buffers derived from weights on the CUDA runtime, run through the CuPy stand-in and the host shim: the load
plan runs once when the program is loaded, a weight that only it read is let go, and every run (one graph
launch, or kernel by kernel) launches the run's plan alone and computes the reference's outputs."""

import pytest

import luminal as lm
from luminal.compiler.kernels.derived_weights import ROLE
from luminal.runtime.cuda.executable import CudaExecutable
from luminal.runtime.cuda.layout import launches_at
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.test_derived_weights import GRAPHS, feed
from tests.runtime.cuda import fake_cupy
from tests.runtime.cuda.test_fake_device import use_shim_for

pytestmark = [
    pytest.mark.needs("g++"),
    pytest.mark.usefixtures("fake_cublas_library"),
]


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("graph", [True, False], ids=["graph", "launches"])
def test_the_load_plan_runs_once_and_the_weight_it_read_is_let_go(name, graph):
    g = GRAPHS[name]()
    program = lm.compile(g, "h100", cache=False)
    use_shim_for(program)
    before = fake_cupy.Function.launched
    exe = CudaExecutable(fake_cupy, program.graph, program.kernels, program.source, g.weight_data, plan=program.plan)
    assert fake_cupy.Function.launched - before == len(exe.load) == 1
    derived = [n for n, b in exe.program.buffers.items() if b.role == ROLE]
    assert set(exe.weights) == set(derived)  # the weight w: read only at load, freed
    for rows in (3, 70, 3):
        before = fake_cupy.Function.launched
        assert_matches(exe.run(feed(rows), graph=graph), lm.run(g, feed(rows)))
        kernels = [launch for launch, _ in launches_at(exe.plan, {"m": rows}) if launch.call is None]
        assert fake_cupy.Function.launched - before == len(kernels)
