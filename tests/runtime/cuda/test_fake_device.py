"""The CUDA runtime's own logic, run on the CPU: CudaExecutable driven through a stand-in for CuPy whose device
memory is host memory and whose kernels run through the host shim (fake_cupy.py). The CUBIN is NVRTC's real one;
only its execution is the shim's. What a GPU adds (the real CuPy calls) is tested by test_device.py."""

import ctypes
import sys

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.runtime import cuda as cuda_runtime
from luminal.runtime.cuda import shim
from luminal.runtime.cuda.buckets import bucket
from luminal.runtime.cuda.executable import CudaExecutable
from luminal.runtime.cuda.layout import launches_at
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import CASES, MODELS, every_kind_symbolic
from tests.runtime.cuda import fake_cupy

pytestmark = [
    pytest.mark.needs("g++"),
    pytest.mark.usefixtures("fake_cublas_library"),
]


def use_shim_for(program) -> None:
    """Make the fake device run `program`'s kernels (its CUBIN loads; the shim library runs)."""
    entries = shim.entries(program.kernels, program.plan)
    fake_cupy.Module.library = ctypes.CDLL(str(shim.build_library(program.source + "\n" + entries)))


def load(g: lm.Graph, **options) -> CudaExecutable:
    program = lm.compile(g, "h100")
    use_shim_for(program)
    return CudaExecutable(
        fake_cupy, program.graph, program.kernels, program.source, g.weight_data, plan=program.plan, **options
    )


@pytest.mark.parametrize("case", ["where_casts", "gather_scatter", "gpt2"])
@pytest.mark.parametrize("graph", [True, False], ids=["graph", "launches"])
def test_matches_the_reference(case, graph):
    g, feed = {**CASES, **MODELS}[case]()
    assert_matches(load(g).run(feed, graph=graph), lm.run(g, feed))


def test_one_capture_per_bucket_replayed_with_the_live_dims():
    g, _ = every_kind_symbolic(5)
    exe = load(g)
    for n, arenas in ((5, 1), (7, 1), (9, 2), (1, 3), (6, 3)):  # buckets 8, 8, 16, 1, 8
        _, feed = every_kind_symbolic(n)
        before = fake_cupy.Function.launched
        assert_matches(exe.run(feed), lm.run(g, feed))
        arena = exe.arena({"n": n})
        assert len(exe.arenas) == arenas and arena.env == bucket({"n": n}, exe.program.symbols)
        # the graph launched every kernel at the bucket's grids, and nothing else ran
        assert fake_cupy.Function.launched - before == len(launches_at(exe.plan, arena.env))
    # each bucket's first run was launched kernel by kernel, then captured; its later runs launched the graph
    assert sorted(a.graph.launches for a in exe.arenas.values()) == [0, 0, 2]


def test_kernel_by_kernel_launches_use_the_live_grids():
    g, feed = every_kind_symbolic(5)
    exe = load(g, graphs=False)
    before = fake_cupy.Function.launched
    by_launch = exe.run(feed)
    assert fake_cupy.Function.launched - before == len(launches_at(exe.plan, {"n": 5}))
    assert all(a.graph is None for a in exe.arenas.values())
    by_graph = exe.run(feed, graph=True)
    for name in by_graph:
        np.testing.assert_array_equal(by_graph[name], by_launch[name], err_msg=name)


def test_device_inputs_and_outputs():
    g, feed = every_kind_symbolic(6)
    exe, want = load(g), lm.run(g, feed)
    got = exe.run({name: fake_cupy.asarray(x) for name, x in feed.items()}, device_outputs=True)
    assert all(isinstance(v, fake_cupy.ndarray) for v in got.values())
    first = {name: v.get() for name, v in got.items()}
    assert_matches(first, want)
    exe.run(every_kind_symbolic(7)[1])
    for name in first:  # a returned device array is a copy: the next run does not change it
        np.testing.assert_array_equal(got[name].get(), first[name])


def test_weights_are_uploaded_once():
    g, feed = CASES["matmul"]()
    exe = load(g)
    where = {buf: array.data.ptr for buf, array in exe.weights.items()}
    exe.run(feed), exe.run(feed, graph=False)
    assert {buf: array.data.ptr for buf, array in exe.weights.items()} == where
    assert exe.weight_uploads == len(where) == 2


def test_an_index_out_of_range_is_reported_and_cleared():
    g, feed = CASES["gather_scatter"]()
    exe = load(g)
    bad = {**feed, "ids": feed["ids"].copy()}
    bad["ids"][3] = 20
    for graph in (True, False):
        with pytest.raises(IndexError, match="out of range"):
            exe.run(bad, graph=graph)
        assert_matches(exe.run(feed, graph=graph), lm.run(g, feed))


def test_the_runtime_loads_through_cupy_where_a_device_is_seen(monkeypatch):
    g, feed = CASES["mlp"]()
    program = lm.compile(g, "h100")
    use_shim_for(program)
    monkeypatch.setattr(cuda_runtime, "missing", lambda: None)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    assert_matches(program.run(feed), lm.run(g, feed))
    assert isinstance(program.prepare()._executable, CudaExecutable)


def test_a_run_waits_for_device_inputs_still_being_written_on_the_callers_stream():
    g, feed = every_kind_symbolic(6)
    exe = load(g)
    caller = fake_cupy.cuda.Stream(non_blocking=True)  # not ordered with the executable's stream by CUDA itself
    with caller:
        device = {name: fake_cupy.asarray(x) for name, x in feed.items()}  # queued on the caller's stream
        got = exe.run(device)
    assert_matches(got, lm.run(g, feed))


def test_device_weights_written_on_the_callers_stream_are_waited_for_at_load():
    g, feed = CASES["matmul"]()
    program = lm.compile(g, "h100")
    use_shim_for(program)
    caller = fake_cupy.cuda.Stream(non_blocking=True)
    with caller:
        weights = {name: fake_cupy.asarray(w) for name, w in g.weight_data.items()}
        exe = CudaExecutable(fake_cupy, program.graph, program.kernels, program.source, weights, plan=program.plan)
    assert_matches(exe.run(feed), lm.run(g, feed))


def test_a_device_weight_at_an_unaligned_address_is_copied_not_used_in_place():
    g, feed = CASES["matmul"]()
    program = lm.compile(g, "h100")
    use_shim_for(program)
    weights = {}
    for name, w in g.weight_data.items():
        flat = np.ascontiguousarray(w).reshape(-1)
        padded = fake_cupy.asarray(np.concatenate([flat[:1], flat]))  # the weight starts 4 bytes into it
        weights[name] = fake_cupy.ndarray(w.shape, w.dtype, memptr=padded.data + flat.itemsize)
    exe = CudaExecutable(fake_cupy, program.graph, program.kernels, program.source, weights, plan=program.plan)
    assert all(array.data.ptr % 16 == 0 for array in exe.weights.values())
    assert_matches(exe.run(feed), lm.run(g, feed))


def test_debug_mode_names_the_kernel_that_met_an_index_out_of_range(monkeypatch):
    g, feed = CASES["gather_scatter"]()
    monkeypatch.setenv("LUMINAL_CUDA_SYNC", "1")
    exe = load(g)
    bad = {**feed, "ids": feed["ids"].copy()}
    bad["ids"][3] = 20
    gathers = [launch.kernel for launch in exe.plan if launch.kernel]
    with pytest.raises(IndexError, match="out of range in ") as raised:
        exe.run(bad, graph=True)  # debug mode launches kernel by kernel whatever the run asks
    assert str(raised.value).rsplit(" ", 1)[-1] in gathers
    assert all(a.graph is None for a in exe.arenas.values())
    assert_matches(exe.run(feed), lm.run(g, feed))


def test_a_failed_capture_reports_its_first_error(monkeypatch):
    g, feed = CASES["mlp"]()
    exe = load(g)
    first = next(launch.kernel for launch in exe.plan if launch.kernel)
    real = exe.functions[first]

    def refused(*args, **kwargs):
        if exe.stream.recording is not None:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported")
        return real(*args, **kwargs)

    def invalidated():
        exe.stream.recording = None
        raise RuntimeError("cudaErrorStreamCaptureInvalidated")

    monkeypatch.setitem(exe.functions, first, refused)
    monkeypatch.setattr(exe.stream, "end_capture", invalidated)
    with pytest.raises(RuntimeError, match="CaptureUnsupported") as raised:
        exe.run(feed)  # the eager first run succeeded; its capture did not
    assert any("CaptureInvalidated" in note for note in raised.value.__notes__)


@pytest.mark.parametrize("has_bfloat16", [False, True], ids=["cupy13", "cupy14"])
def test_bfloat16_moves_as_bfloat16_arrays_where_cupy_has_them_else_as_bits(monkeypatch, has_bfloat16):
    monkeypatch.setattr(fake_cupy, "BFLOAT16", has_bfloat16)
    g, feed = CASES["where_casts"]()
    exe = load(g)
    assert exe.bfloat16 == has_bfloat16
    got = exe.run(feed, device_outputs=True)
    stored = ml_dtypes.bfloat16 if has_bfloat16 else np.uint16
    assert got["bf16"].dtype == stored
    host = {name: v.get() for name, v in got.items()}
    host["bf16"] = host["bf16"].view(ml_dtypes.bfloat16)
    assert_matches(host, lm.run(g, feed))
    if has_bfloat16:  # and a bfloat16 device input is taken as it is
        device = {**feed, "b": fake_cupy.asarray(feed["b"])}
        assert_matches(exe.run(device), lm.run(g, feed))
