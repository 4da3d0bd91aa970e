"""A quantised (Q8_0) decode step compiled for h100: the generated CUDA compiles with nvcc for sm_90, computes what
the reference interpreter does through the host shim, and its kernels read the int8 weights themselves."""

import shutil

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.fuse_dequant import is_dequantisation
from luminal.llm_package import build_package
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.llm_folders import hf_folder


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    hf_folder(folder, "llama")
    graph = build_package(folder, max_batch=4, positions=64, quantize="int8").graphs.step
    return graph, lm.compile(graph, "h100", cache=False)


def test_the_kernels_read_int8_and_no_float_copy_is_made(step):
    _, program = step
    buffers = program.kernels.buffers
    int8 = {n for n, b in buffers.items() if b.dtype == lm.int8}
    assert int8 and all(buffers[n].role == "weight" for n in int8)
    assert not [k.name for k in program.kernels.kernels if is_dequantisation(k, buffers)]
    assert "const int8_t*" in program.source


@pytest.mark.skipif(not nvcc.available(), reason="needs nvcc")
def test_the_generated_cuda_compiles_for_sm_90(step):
    usages = nvcc.compile_cuda(step[1].source)
    assert {u.arch for u in usages} >= {"90"}


@pytest.mark.skipif(shutil.which("g++") is None, reason="the host shim needs g++ (C++20)")
def test_the_generated_cuda_means_what_the_interpreter_computes(step):
    graph, program = step
    rng, past = np.random.default_rng(0), 5
    feed = {
        "input_ids": np.array([[5], [9]], np.int64),
        "attention_mask": np.ones((2, past + 1), np.int64),
        "position_ids": np.full((2, 1), past, np.int64),
    }
    for k in range(2):
        for part in ("key", "value"):
            feed[f"past.{k}.{part}"] = rng.standard_normal((2, 2, past, 8)).astype(np.float32)
    got, want = ShimRuntime().load(program).run(feed), lm.run(graph, feed)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)
