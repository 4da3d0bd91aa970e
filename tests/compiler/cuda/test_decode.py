"""A Llama decode step (bf16, grouped-query attention, RoPE, a KV cache) compiled for h100: what it launches, and
that it computes through the host shim what the reference interpreter computes."""

import shutil

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.nn.models.generation import decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random

LAYERS = 1
CONFIG = LlamaConfig(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    dtype=lm.bfloat16,
)


@pytest.fixture(scope="module")
def step():
    # past may reach 2047: the attention runs as flash decoding
    graph = decoder_graphs(LlamaForCausalLM(CONFIG), max_batch=1, max_positions=2048).step
    graph = bind_random(graph)
    return graph, lm.compile(graph, "h100", cache=False)


def _feed(past: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(past)
    feed = {"input_ids": np.array([[7]]), "position_ids": np.array([[past]])}
    feed["attention_mask"] = np.ones((1, past + 1), np.int64)
    for k in range(LAYERS):
        for part in ("key", "value"):
            feed[f"past.{k}.{part}"] = rng.standard_normal((1, 2, past, 16)).astype(ml_dtypes.bfloat16)
    return feed


def test_a_layer_launches_its_linears_as_gemvs_and_fuses_the_key_value_casts(step):
    """Per layer: two norms, seven GEMVs (q, k, v, o, gate, up, down), the key and value caches' concatenations
    (outputs of the step) and a flash-decoding attention that computes q's RoPE and reads the bf16 caches in
    place (no float32 copy of them), then its combine."""
    _, program = step
    plan = launch_plan(program.kernels)
    shapes = [launch.shape for launch in plan]
    assert shapes.count("gemv") == 7 * LAYERS + 1  # and the logits
    assert shapes.count("attention_split") == shapes.count("combine") == LAYERS
    assert shapes.count("row") == 2 * LAYERS + 1
    # RoPE's tables are computed where they are read (compiler/fuse_index.py); left: the causal mask's two
    # kernels at most (their indices may not simplify enough to inline) and each layer's two cache concatenations.
    assert shapes.count("thread") <= 2 * LAYERS + 2
    assert "warp" not in shapes and "gemm" not in shapes and "attention" not in shapes
    buffers = program.kernels.buffers
    for launch in plan:
        if launch.shape == "attention_split":
            assert [buffers[b].dtype for b in launch.buffers].count(lm.bfloat16) >= 2  # the key and value caches


@pytest.mark.skipif(shutil.which("g++") is None, reason="the host shim needs g++ (C++20)")
@pytest.mark.parametrize("past", [1, 300])  # one key block, two
def test_matches_the_reference(step, past):
    graph, program = step
    feed = {name: value for name, value in _feed(past).items() if name in graph.inputs}
    assert_matches(ShimRuntime().load(program).run(feed), lm.run(graph, feed))
