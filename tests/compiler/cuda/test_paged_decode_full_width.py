"""The paged decode step at the widths of the bench's 1.1B model (bench/gpu_models.py FULL: hidden 2048, 32 query
and 8 key-value heads, intermediate 8192), two of its layers and a small vocabulary, run through the host shim
against the reference interpreter. The GEMV plans chosen at these widths (row groups, the merged q/k/v and
gate/up launches, the down projection's K = 8192) are the ones a GPU runs, and the small test model never
reaches them."""

import dataclasses
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.compiler.cuda.program import launch_plan
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import DEFAULT_BLOCK_SIZE, paged_step_graph, pool_name
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda.compare import assert_matches

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))  # the bench's model sizes
from gpu_models import FULL  # noqa: E402

pytestmark = pytest.mark.needs("g++")

LAYERS = 2
CONFIG = dataclasses.replace(FULL.llama, num_hidden_layers=LAYERS, vocab_size=256)
POOL_BLOCKS = 32


def _bind(g: lm.Graph) -> lm.Graph:
    """Weights as a trained model's are scaled (matrices 0.02, norms about 1), so that activations stay near 1
    through the layers and bf16's rounding is the only difference left."""
    rng = np.random.default_rng(0)
    values = {}
    for label in g.unbound_weights():
        node = g.nodes[g.weights[label]]
        shape = tuple(int(d) for d in node.shape)
        scaled = 0.02 * rng.standard_normal(shape) if len(shape) > 1 else 1 + 0.1 * rng.standard_normal(shape)
        values[label] = scaled.astype(np.float32).astype(node.dtype.np)
    return g.bind(values) or g


@pytest.fixture(scope="module")
def step():
    graph = _bind(paged_step_graph(LlamaForCausalLM(CONFIG), max_batch=1, max_positions=2048))
    return graph, lm.compile(graph, "h100", cache=False)


def test_the_widths_reach_the_merged_and_grouped_gemvs(step):
    _, program = step
    shapes = [launch.shape for launch in launch_plan(program.kernels)]
    assert shapes.count("flash_decode") == LAYERS
    gemvs = [launch.writes for launch in launch_plan(program.kernels) if launch.shape == "gemvs"]
    assert gemvs == [3, 2] * LAYERS  # q/k/v and gate/up, per layer


def test_matches_the_reference(step):
    graph, program = step
    rng = np.random.default_rng(1)
    length = 300  # past keys over several blocks and flash-decoding splits
    table = rng.permutation(POOL_BLOCKS)[: length // DEFAULT_BLOCK_SIZE + 1].reshape(1, -1).astype(np.int64)
    feed = {"input_ids": np.array([[7]]), "position_ids": np.array([[length]]), "block_table": table}
    feed["slots"] = table[:, length // DEFAULT_BLOCK_SIZE : length // DEFAULT_BLOCK_SIZE + 1] * DEFAULT_BLOCK_SIZE
    feed["slots"] = feed["slots"] + length % DEFAULT_BLOCK_SIZE
    pool_shape = (POOL_BLOCKS, CONFIG.num_key_value_heads, DEFAULT_BLOCK_SIZE, CONFIG.head_size)
    for k in range(LAYERS):
        for part in ("key", "value"):
            feed[pool_name(k, part)] = rng.standard_normal(pool_shape).astype(ml_dtypes.bfloat16)
    want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
    assert_matches(ShimRuntime().load(program).run(feed), want)
