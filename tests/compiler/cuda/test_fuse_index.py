"""Kernels that are functions of their indices alone (compiler/fuse_index.py) are computed by their readers on
CUDA targets, and the result is unchanged."""

import shutil

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches


def tables_read_twice() -> lm.Graph:
    """cos and sin of an iota (RoPE's tables), each read by two kernels that also read an input."""
    g = lm.Graph()
    x = g.input("x", (lm.sym("rows", max=8), 16))
    angle = g.arange(16).float() * 0.1
    cos, sin = angle.cos(), angle.sin()
    (x * cos + x.exp() * sin).output("a")
    (x.sum(-1, keepdim=True) * cos - sin).output("b")
    return g


def test_the_tables_cost_no_launch_on_a_gpu_and_stay_kernels_on_the_cpu():
    g = tables_read_twice()
    cuda = lm.compile(g, "h100", cache=False)
    assert len(launch_plan(cuda.kernels)) == 2
    assert len(lm.compile(g, "cpu", cache=False).kernels.kernels) > 2


@pytest.mark.skipif(shutil.which("g++") is None, reason="the host shim needs g++ (C++20)")
def test_matches_the_reference():
    g = tables_read_twice()
    feed = {"x": np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)}
    assert_matches(ShimRuntime().load(lm.compile(g, "h100", cache=False)).run(feed), lm.run(g, feed))
