"""profile=True for a CUDA target: candidates timed on the target's GPU with CUDA events, the fastest kept (run
here on the fake device, fake_cupy.py); without such a GPU, a RuntimeUnavailable that names what is missing and
says the roofline ranks the candidates when profile is left off."""

import ctypes
import sys

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.analysis import profile
from luminal.compiler.cuda.program import run_plan
from luminal.runtime import cuda as cuda_runtime
from luminal.runtime.cuda import devices, shim
from luminal.runtime.cuda.executable import CudaExecutable
from luminal.runtime.cuda.shim import ShimRuntime
from luminal.runtime.registry import RuntimeUnavailable
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random
from tests.runtime.cuda import fake_cupy


def linear() -> lm.Graph:
    g = lm.Graph()
    x = g.input("x", (lm.sym("b", max=4), 32, 64))
    F.relu(F.linear(x, g.weight("w", (64, 64)))).output("y")
    return bind_random(g)


def on_the_fake_device(cp, graph, kernels, source):
    """profile.load_on_cuda for the fake device: the candidate's kernels run through its own shim library."""
    plan = run_plan(kernels)
    fake_cupy.Module.library = ctypes.CDLL(str(shim.build_library(source + "\n" + shim.entries(kernels, plan))))
    return CudaExecutable(cp, graph, kernels, source, graph.weight_data, plan=plan)


@pytest.mark.needs("g++")
@pytest.mark.usefixtures("fake_cublas_library")
def test_candidates_are_timed_with_cuda_events_and_the_fastest_kept(monkeypatch):
    monkeypatch.setattr(profile, "cuda_device", lambda target: fake_cupy)
    monkeypatch.setattr(profile, "load_on_cuda", on_the_fake_device)
    monkeypatch.setattr(profile, "ROUNDS", 1)  # every shim launch starts its block's threads: keep them few
    monkeypatch.setattr(profile, "GRAPH_REPEATS", 2)
    g = linear()
    program = lm.compile(g, "h100", cache=False, profile=True, profile_dims={"b": 2})
    timed = {r["name"]: r["seconds"]["measured_median"] for r in program.report["candidates"] if "seconds" in r}
    assert len(timed) >= 2 and program.report["choice"] == min(timed, key=timed.get)
    assert all(t > 0 for t in timed.values())
    feed = {"x": np.random.default_rng(0).standard_normal((2, 32, 64)).astype(np.float32)}
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(g, feed))


def test_without_a_gpu_profiling_says_what_is_missing(monkeypatch):
    monkeypatch.setattr(cuda_runtime, "missing", lambda: "no CUDA device: CuPy found none")
    with pytest.raises(RuntimeUnavailable, match=r"(?s)h100 GPU.*CuPy found none.*without profile=True.*roofline"):
        lm.compile(linear(), "h100", cache=False, profile=True)


def test_a_gpu_of_another_target_is_not_used_to_rank_candidates(monkeypatch):
    monkeypatch.setattr(cuda_runtime, "missing", lambda: None)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(devices, "local_gpus", lambda: [devices.Gpu(0, "NVIDIA A100-SXM4-80GB", "a100")])
    with pytest.raises(RuntimeUnavailable, match=r"A100-SXM4-80GB \(target a100\), not a GPU of target h100"):
        profile.cuda_device("h100")
    assert profile.cuda_device("a100") is fake_cupy
