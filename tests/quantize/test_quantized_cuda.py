"""A quantised (Q8_0) decode step compiled for h100: the generated CUDA compiles with nvcc for sm_90, computes what
the reference interpreter does through the host shim, and its kernels read the int8 weights themselves."""

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cpu.fuse_dequant import is_dequantisation
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


@pytest.mark.needs("nvcc")
def test_the_generated_cuda_compiles_for_sm_90(step):
    usages = nvcc.compile_cuda(step[1].source)
    assert {u.arch for u in usages} >= {"90"}


@pytest.mark.needs("g++")
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


def test_a_paged_step_over_many_sequences_reads_each_q8_0_weight_once_per_run():
    """Projections whose K spans several Q8_0 blocks (the tiny model's K = 32 is one) are GEMVs with 16 int8 per
    load, each block computing its outputs for groups of the batch's rows: a grid over N alone."""
    from luminal.compiler.analysis import gemv_plan
    from luminal.compiler.cuda.program import kernel_launches, planned_launches
    from luminal.compiler.gpu.launch import GEMV_ROW_GROUP, GEMV_ROWS, row_group
    from luminal.compiler.kernels import ir
    from luminal.nn.models.loading import causal_lm
    from luminal.nn.models.paged_decoding import paged_step_graph
    from tests.compiler.cuda.graphs import bind_random

    config = {"model_type": "llama", "vocab_size": 256, "hidden_size": 128, "intermediate_size": 256,
              "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip
    graph = bind_random(paged_step_graph(causal_lm(config, "int8"), max_batch=16, max_positions=64))
    program = lm.compile(graph, "h100", cache=False)
    buffers = program.kernels.buffers
    int8_readers = [
        (kernel, launch)
        for members, launch in planned_launches(program.kernels)
        for kernel in members
        if any(buffers[b].dtype == lm.int8 for b in ir.buffers_read(kernel))
    ]
    assert len(int8_readers) == 8  # q, k, v, o, gate, up, down and the LM head
    for kernel, launch in int8_readers:
        plan = gemv_plan.plan(kernel)
        assert launch.shape in ("gemv", "gemvs") and plan.stream.dtype == lm.int8 and plan.width == 16
        assert row_group(kernel, plan) == GEMV_ROW_GROUP
        (alone,) = kernel_launches(kernel, program.kernels)  # its part of a merged launch's grid
        assert alone.grid.is_const and alone.grid.value == kernel.shape[-1].value // GEMV_ROWS
