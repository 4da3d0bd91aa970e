"""A paged decode step whose layers are mixtures of experts (4 experts, 2 per token, bfloat16) compiled for h100:
the router's top-k and the gathered experts compile for sm_80 and sm_90 without spills, and through the host shim
the step computes what the reference interpreter does; so does the float32 step with int8 (Q8_0) experts, whose
tokens gather their experts' int8 rows and scales."""

from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.moe_config import MoeConfig
from luminal.nn.models.paged_decoding import paged_step_graph
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random
from tests.compiler.cuda.test_decode import CONFIG
from tests.compiler.cuda.test_paged_decode import _feed

MOE = replace(CONFIG, moe=MoeConfig(experts=4, top_k=2, intermediate_size=32, renormalize=True, sparse_layers=(0, 1)))


@pytest.fixture(scope="module")
def step():
    graph = bind_random(paged_step_graph(LlamaForCausalLM(MOE), max_batch=4, max_positions=2048))
    return graph, lm.compile(graph, "h100", cache=False)


@pytest.mark.needs("g++")
def test_matches_the_reference(step):
    graph, program = step
    feed = _feed([5, 40])
    want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
    assert_matches(ShimRuntime().load(program).run(feed), want)


@pytest.mark.needs("nvcc")
def test_compiles_for_sm80_and_sm90_without_spills(step):
    usages = nvcc.compile_cuda(step[1].source)
    assert {u.arch for u in usages} == {"80", "90"}
    assert all(u.spill_bytes == 0 for u in usages), [u for u in usages if u.spill_bytes]


@pytest.mark.needs("g++")
@pytest.mark.needs("nvcc")
def test_int8_experts_match_the_reference_and_compile_without_spills():
    model = LlamaForCausalLM(replace(MOE, dtype=lm.float32), quantize="int8")
    graph = bind_random(paged_step_graph(model, max_batch=4, max_positions=2048))
    assert graph.nodes[graph.weights["model.layers.0.mlp.experts.down_proj"]].dtype == lm.int8
    program = lm.compile(graph, "h100", cache=False)
    feed = {k: v.astype(np.float32) if k.startswith("pool") else v for k, v in _feed([5, 40]).items()}
    want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
    assert_matches(ShimRuntime().load(program).run(feed), want)
    assert all(u.spill_bytes == 0 for u in nvcc.compile_cuda(program.source))
