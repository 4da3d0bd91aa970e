"""The CUDA runtime on a real device, against the reference interpreter: the test graphs and models, one CUDA
graph per shape bucket equal to kernel-by-kernel launches, dims within and across buckets, device inputs and
outputs through DLPack, resident weights, index errors. Skipped where CuPy sees no device."""

import numpy as np
import pytest

import luminal as lm
from luminal.runtime.cuda import CudaRuntime, missing
from luminal.runtime.registry import runtime_for
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import CASES, MODELS, every_kind_symbolic

pytestmark = pytest.mark.skipif(missing() is not None, reason=f"no CUDA here: {missing()}")


def load(g: lm.Graph, **options):
    return CudaRuntime().load(lm.compile(g, "h100"), **options)


@pytest.mark.parametrize("case", [*CASES, *(m for m in MODELS if m not in CASES)])
@pytest.mark.parametrize("graph", [True, False], ids=["graph", "launches"])
def test_matches_the_reference(case, graph):
    g, feed = {**CASES, **MODELS}[case]()
    assert_matches(load(g).run(feed, graph=graph), lm.run(g, feed))


def test_program_run_goes_through_the_cuda_runtime():
    g, feed = CASES["mlp"]()
    program = lm.compile(g, "h100")
    assert_matches(program.run(feed), lm.run(g, feed))
    assert type(program.prepare()._executable).__name__ == "CudaExecutable"


def test_the_graph_launch_equals_the_kernel_by_kernel_launches():
    g, feed = every_kind_symbolic(7)
    exe = runtime_for("cuda").load(lm.compile(g, "h100"))
    by_graph, by_launch = exe.run(feed), exe.run(feed, graph=False)
    for name in by_graph:  # the same kernels: only the grids differ, and blocks past the live dims do nothing
        np.testing.assert_array_equal(by_graph[name], by_launch[name], err_msg=name)


def test_dims_within_and_across_buckets():
    g, _ = every_kind_symbolic(5)
    exe = load(g)
    for n, arenas in ((5, 1), (7, 1), (8, 1), (9, 2), (1, 3), (40, 4), (6, 4)):  # buckets 8, 8, 8, 16, 1, 40, 8
        _, feed = every_kind_symbolic(n)
        assert_matches(exe.run(feed), lm.run(g, feed))
        assert len(exe.arenas) == arenas and all(a.graph is not None for a in exe.arenas.values())


def test_device_inputs_and_outputs_through_dlpack():
    import cupy

    g, feed = CASES["mlp"]()
    exe, want = load(g), lm.run(g, feed)
    got = exe.run({name: cupy.asarray(x) for name, x in feed.items()}, device_outputs=True)
    assert isinstance(got["out"], cupy.ndarray)
    assert_matches({"out": cupy.asnumpy(got["out"])}, want)
    first = cupy.asnumpy(got["out"])
    exe.run({name: x * 2 for name, x in feed.items()}, device_outputs=True)
    np.testing.assert_array_equal(cupy.asnumpy(got["out"]), first)  # a returned device array is the caller's own
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch build has no CUDA: torch.from_dlpack cannot take a device array")
    np.testing.assert_array_equal(torch.from_dlpack(got["out"]).cpu().numpy(), first)
    cuda_feed = {name: torch.from_numpy(x).cuda() for name, x in feed.items()}
    assert_matches(exe.run(cuda_feed), want)


def test_weights_stay_resident():
    g, feed = CASES["matmul"]()
    exe = load(g)
    where = {buf: array.data.ptr for buf, array in exe.weights.items()}
    for _ in range(3):
        exe.run(feed)
    assert {buf: array.data.ptr for buf, array in exe.weights.items()} == where
    assert exe.weight_uploads == len(where) == len(g.weights)


@pytest.mark.parametrize("graph", [True, False])
def test_an_index_out_of_range_is_reported_and_cleared(graph):
    g, feed = CASES["gather_scatter"]()
    exe = load(g)
    bad = {**feed, "ids": feed["ids"].copy()}
    bad["ids"][3] = 20
    with pytest.raises(IndexError, match="out of range"):
        exe.run(bad, graph=graph)
    assert_matches(exe.run(feed, graph=graph), lm.run(g, feed))  # the flag is cleared on the next run
