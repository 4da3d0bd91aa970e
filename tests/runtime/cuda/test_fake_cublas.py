"""The CUDA runtime's cuBLAS steps (runtime/cuda/cublas.py) on the fake device: the executable issues each "cublas"
step through the stand-in for cuBLAS's C API (fake_cublas.py, numpy on the fake device's memory) on its own
stream, so a CUDA graph captures it with the kernels; checked against the reference interpreter for every way a
call is shaped (batched, transposed operands, half types, a float32 output from halves), at the bucket's dims
and the live ones, beside generated kernels, and when profile=True times the candidates."""

import ctypes
from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.analysis import profile
from luminal.compiler.analysis.targets import TARGETS
from luminal.compiler.program import CompiledProgram
from luminal.runtime.cuda import shim
from luminal.runtime.cuda.cublas import COMPUTE_32F, COMPUTE_32F_FAST_TF32
from luminal.runtime.cuda.executable import CudaExecutable
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.gemm_cases import GEMMS
from tests.runtime.cuda import fake_cublas, fake_cupy

pytestmark = [
    pytest.mark.needs("g++"),
    pytest.mark.usefixtures("fake_cublas_library"),
]


def on_fake_device(program, **options) -> CudaExecutable:
    entries = shim.entries(program.kernels, program.plan)
    fake_cupy.Module.library = ctypes.CDLL(str(shim.build_library(program.source + "\n" + entries)))
    graph = program.graph
    return CudaExecutable(fake_cupy, graph, program.kernels, program.source, graph.weight_data, plan=program.plan,
                          **options)  # fmt: skip


def load(g: lm.Graph, **options) -> CudaExecutable:
    return on_fake_device(lm.compile(g, "h100", cache=False, gemm_library="always"), **options)


@pytest.mark.parametrize("case", list(GEMMS))
@pytest.mark.parametrize("graph", [True, False], ids=["graph", "launches"])
def test_matches_the_reference(case, graph):
    g, feed = GEMMS[case]()
    exe = load(g)
    assert exe.cublas is not None and not exe.functions  # one cuBLAS step, no kernel
    before = len(fake_cublas.calls)
    assert_matches(exe.run(feed, graph=graph), lm.run(g, feed))
    assert len(fake_cublas.calls) == before + (2 if graph else 1)  # a graph run is issued, then captured


def test_the_graph_replays_the_captured_call_at_the_buckets_dims():
    g, feed = GEMMS["linear_bf16"]()  # rows: 37 (bucket 64)
    exe = load(g)
    before = len(fake_cublas.calls)
    for rows in (37, 64, 40, 5):  # buckets 64, 64, 64, 8
        x = (np.random.default_rng(rows).standard_normal((rows, 128)) * 0.5).astype(feed["x"].dtype)
        assert_matches(exe.run({"x": x}), lm.run(g, {"x": x}))
    issued = fake_cublas.calls[before:]
    # a bucket's first run issued at its live rows, then captured once at the bucket's rows; replayed after
    assert [c["n"] for c in issued] == [37, 64, 5, 8]
    assert sorted(a.graph.launches for a in exe.arenas.values()) == [0, 2]
    rows = exe.run({"x": feed["x"][:9]}, graph=False)  # kernel by kernel: issued at the live rows
    assert fake_cublas.calls[-1]["n"] == 9 and rows["y"].shape == (9, 96)


def test_cublas_steps_run_between_generated_kernels():
    g, rng = lm.Graph(), np.random.default_rng(31)
    x = F.softmax(g.input("x", (70, 40)), dim=-1)  # a kernel before the GEMM
    y = x @ g.input("b", (40, 90))
    y.output("y")
    F.softmax(y, dim=-1).output("p")  # and one after, reading the step's output
    feed = {
        "x": rng.standard_normal((70, 40)).astype(np.float32),
        "b": rng.standard_normal((40, 90)).astype(np.float32),
    }
    exe = load(g)
    assert [launch.shape for launch in exe.plan].count("cublas") == 1 and len(exe.plan) >= 3
    for graph in (True, False):
        assert_matches(exe.run(feed, graph=graph), lm.run(g, feed))


def test_float32_steps_use_tf32_only_when_asked():
    g, feed = GEMMS["batched"]()
    for tf32, compute in ((False, COMPUTE_32F), (True, COMPUTE_32F_FAST_TF32)):
        load(g, tf32=tf32).run(feed)
        assert fake_cublas.calls[-1]["compute"] == compute
    g, feed = GEMMS["half_to_float"]()
    load(g, tf32=True).run(feed)
    assert fake_cublas.calls[-1]["compute"] == COMPUTE_32F  # half operands: fp32 sums whatever tf32 says


def test_the_stand_in_checks_the_arguments_as_cublas_does():
    handle = fake_cublas.create()
    a = fake_cupy.zeros(64, np.float32)
    one = np.ones(2, np.float32)
    with pytest.raises(fake_cublas.CublasError, match="lda"):
        fake_cublas.gemmStridedBatchedEx(handle, 0, 0, 8, 8, 8, one.ctypes.data, a.data.ptr, 0, 4, 0, a.data.ptr, 0,
                                         8, 0, one.ctypes.data, a.data.ptr, 0, 8, 0, 1, COMPUTE_32F, -1)  # fmt: skip
    fake_cublas.destroy(handle)


def test_the_stand_in_refuses_a_captured_call_on_cublas_own_workspace():
    """cublasSetStream resets the handle's workspace to cuBLAS's pool, which allocates: the runtime binds the stream
    once and then sets its own workspace, and issues no setStream between steps."""
    g, feed = GEMMS["linear_bf16"]()  # rows: 37 (bucket 64)
    exe = load(g)
    exe.run(feed)  # captured on the executable's own workspace
    fake_cublas.setStream(exe.cublas.handle, exe.stream.ptr)
    few = {"x": feed["x"][:5]}  # bucket 8: captured anew
    with pytest.raises(fake_cublas.CublasError, match="workspace pool"):
        exe.run(few)
    fake_cublas.setWorkspace(exe.cublas.handle, exe.cublas.workspace.ptr, 1)
    assert_matches(exe.run(few), lm.run(g, few))


def test_profile_times_the_cublas_candidate_like_the_others(monkeypatch):
    monkeypatch.setattr(profile, "cuda_device", lambda target: fake_cupy)
    monkeypatch.setattr(profile, "load_on_cuda", lambda cp, graph, kernels, source: on_fake_device(
        CompiledProgram(graph, "h100", kernels, source, {})))  # fmt: skip
    monkeypatch.setattr(profile, "ROUNDS", 1)
    monkeypatch.setattr(profile, "GRAPH_REPEATS", 2)
    # Generated GEMMs made to look slow to the roofline, so that "auto" adds the cuBLAS variant of this small one.
    monkeypatch.setitem(TARGETS, "h100", replace(TARGETS["h100"], gemm_efficiency=1e-4))
    g, feed = GEMMS["transposed"]()
    program = lm.compile(g, "h100", cache=False, profile=True)
    timed = {r["name"]: r["seconds"]["measured_median"] for r in program.report["candidates"] if "seconds" in r}
    assert any(name.endswith("+cublas") for name in timed) and len(timed) >= 2
    assert program.report["choice"] == min(timed, key=timed.get)
    assert_matches(on_fake_device(program).run(feed), lm.run(g, feed))
