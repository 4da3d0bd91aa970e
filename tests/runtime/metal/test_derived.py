"""A Metal program's kernels over weights alone run once at load (compiler/kernels/derived_weights.py), as on CUDA: the
scaled weight and the transposed half copy of tests/compiler/cuda/test_derived_weights.py are in the load plan,
not a run's, and the source says so; the runtime (through the stand-in Metal device) encodes them once in a
command buffer of their own, keeps their outputs resident and lets go of the weight no run reads; through the
runtime and the Metal shim the outputs are the reference interpreter's."""

import pytest

import luminal as lm
from luminal.compiler.kernels.derived_weights import ROLE
from luminal.compiler.metal.program import launch_plan, load_plan
from luminal.runtime import metal as metal_runtime
from luminal.runtime.metal.shim import MetalShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.test_derived_weights import GRAPHS, feed
from tests.runtime.metal import fake_metal

needs_gxx = pytest.mark.needs("g++")


@pytest.fixture(scope="module", params=sorted(GRAPHS))
def compiled(request):
    g = GRAPHS[request.param]()
    return g, lm.compile(g, "m2", cache=False)


def derived_buffer(prog) -> str:
    (name,) = [name for name, b in prog.kernels.buffers.items() if b.role == ROLE]
    return name


def test_the_weight_kernel_is_in_the_load_plan_not_a_runs(compiled):
    prog, derived = compiled[1], derived_buffer(compiled[1])
    (once,), (run,) = load_plan(prog.kernels), launch_plan(prog.kernels)  # run: the GEMM alone
    assert once.buffers[0] == derived and once.shape == "thread"
    assert run.shape == "gemm" and derived in run.buffers and once.kernel != run.kernel
    assert f"/* {once.kernel}: thread," in prog.source and "once at load */" in prog.source


@needs_gxx
def test_the_runtime_derives_once_and_lets_the_weight_go(compiled):
    g, prog = compiled
    device = fake_metal.use(prog)
    exe = metal_runtime.MetalRuntime().load(prog, api=fake_metal)
    derived = derived_buffer(prog)
    (load,) = device.command_buffers  # the load plan, encoded once at load
    (encoder,) = load.encoders
    assert [d.pipeline.function.name for d in encoder.dispatches] == [launch.kernel for launch in exe.load]
    assert derived in exe.weights and set(prog.kernels.weights.values()).isdisjoint(exe.weights)
    for rows in (3, 70):
        assert_matches(exe.run(feed(rows)), lm.run(g, feed(rows)))
    assert len(device.command_buffers) == 3  # one per run after the load's: nothing derived again
    for commands in device.command_buffers[1:]:
        (encoder,) = commands.encoders
        assert [d.pipeline.function.name for d in encoder.dispatches] == [launch.kernel for launch in exe.plan]


@needs_gxx
def test_the_metal_shim_prepares_then_runs(compiled):
    g, prog = compiled
    loaded = MetalShimRuntime().load(prog)
    for rows in (3, 70):
        assert_matches(loaded.run(feed(rows)), lm.run(g, feed(rows)))
