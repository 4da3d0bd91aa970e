"""Phi-3's paged decode step compiled for h100: its fused qkv_proj and gate_up_proj are one GEMV each, the
attention still runs as flash decoding reading the pools, and with longrope over a partial rotation and a window
it computes through the host shim what the reference interpreter does."""

from dataclasses import replace

import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import paged_step_graph
from luminal.nn.rope_scaling import RopeScaling
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random
from tests.compiler.cuda.test_decode import CONFIG, LAYERS
from tests.compiler.cuda.test_paged_decode import _feed

_factors = np.random.default_rng(0).random((2, 6))
# 12 of 16 features rotated (6 frequencies); rows of 300 keys are past the original context of 64: long factors.
LONGROPE = RopeScaling("longrope", 32.0, 64, attention_factor=1.2, short_factor=tuple(1 + _factors[0]),
                       long_factor=tuple(1 + 30 * _factors[1]))  # fmt: skip
PHI3 = replace(CONFIG, fused_projections=True, partial_rotary_factor=0.75, rope=LONGROPE, windows=(100, 100))


@pytest.fixture(scope="module")
def step():
    graph = bind_random(paged_step_graph(LlamaForCausalLM(PHI3), max_batch=4, max_positions=2048))
    return graph, lm.compile(graph, "h100", cache=False)


def test_fused_projections_are_one_gemv_each_beside_flash_decoding(step):
    _, program = step
    shapes = [launch.shape for launch in launch_plan(program.kernels)]
    assert shapes.count("flash_decode") == LAYERS and "gemvs" not in shapes  # nothing left to batch
    assert shapes.count("gemv") == 4 * LAYERS + 1  # qkv, o, gate_up, down per layer, and the head


@pytest.mark.needs("g++")
def test_matches_the_reference(step):
    graph, program = step
    feed = _feed([300, 17, 40])
    want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
    assert_matches(ShimRuntime().load(program).run(feed), want)
