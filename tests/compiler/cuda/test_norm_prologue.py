"""Norms in the prologue of the GEMVs that read them (compiler/gpu/norm_prologue.py) and residual sums in the
epilogue of the GEMVs that make them (compiler/fusion/fuse_residual.py): which kernels fuse, and that the fused kernels
compute through the host shim what the reference interpreter computes."""

import numpy as np
import pytest

import luminal as lm
import luminal.functional as F
from luminal.compiler.analysis import gemv_plan
from luminal.compiler.cuda.program import launch_plan
from luminal.compiler.gpu.launch import loop_shape
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

K, N = 512, 96  # K above the block size: each thread sums several squares before the fold
needs_gxx = pytest.mark.needs("g++")


def _norm(kind: str, h: lm.Tensor, g: lm.Graph, name: str) -> lm.Tensor:
    w = g.weight(f"{name}.w", (K,), dtype=lm.bfloat16)
    if kind == "rms":
        return F.rms_norm(h, K, w, eps=1e-5)
    return F.layer_norm(h, K, w, g.weight(f"{name}.b", (K,), dtype=lm.bfloat16))


def _blocks(kind: str, also_read: bool = False) -> tuple[lm.Graph, dict[str, np.ndarray]]:
    """Two pre-norm residual blocks at one row, bf16: h1 = x + W1 norm(x); out = W2 norm(h1) (+ norm(h1))."""
    g = lm.Graph()
    x = g.input("x", (1, K), dtype=lm.bfloat16)
    w1 = g.weight("w1", (K, K), dtype=lm.bfloat16)
    w2 = g.weight("w2", (N, K), dtype=lm.bfloat16)
    h1 = x + F.linear(_norm(kind, x, g, "n1"), w1)
    y = _norm(kind, h1, g, "n2")
    out = F.linear(y, w2)
    if also_read:
        out = out + y[:, :N]  # read outside the GEMV's vector too
    out.output("out")
    rng = np.random.default_rng(3)
    return bind_random(g), {"x": rng.standard_normal((1, K)).astype(lm.bfloat16.np)}


def _shapes(program) -> list[str]:
    return [launch.shape for launch in launch_plan(program.kernels)]


def _prologues(program) -> int:
    kernels = [k for k in program.kernels.kernels if loop_shape(k) == "gemv"]
    return sum(gemv_plan.plan(k).statistics for k in kernels)


@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_each_norm_goes_into_its_gemv_and_the_residual_into_the_first_gemv(kind):
    program = lm.compile(_blocks(kind)[0], "h100", cache=False)
    assert "row" not in _shapes(program)
    assert _prologues(program) == 2


def test_a_norm_read_by_other_kernels_too_keeps_its_statistics_kernel():
    """The second norm is also read by the final add (the GEMV's epilogue): its sum of squares stays a kernel."""
    program = lm.compile(_blocks("rms", also_read=True)[0], "h100", cache=False)
    assert len(_shapes(program)) == 3
    assert _prologues(program) == 1


def test_the_cpu_target_keeps_its_own_kernels():
    """The passes run for CUDA targets only: the C program of the same graph is what it was."""
    graph, feed = _blocks("rms")
    assert_matches(lm.compile(graph, "cpu", cache=False).run(feed), lm.run(graph, feed))


@needs_gxx
@pytest.mark.parametrize("kind,also_read", [("rms", False), ("layer", False), ("rms", True)])
def test_matches_the_reference(kind, also_read):
    graph, feed = _blocks(kind, also_read)
    program = lm.compile(graph, "h100", cache=False)
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(graph, feed))
