"""The paged chunk graph of a model mixing a full and a sliding-window layer (luminal/nn/models/paged_decoding.py),
compiled for h100: nvcc builds it without spills, and through the host shim a chunk that follows a cached prefix
computes what the reference interpreter does (logits and the pools' new keys and values)."""

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import luminal as lm
from luminal.nn.models.llama import LlamaForCausalLM
from luminal.nn.models.paged_decoding import paged_chunk_graph, pool_name
from luminal.runtime.cuda.shim import ShimRuntime
from tests.compiler.cuda import nvcc
from tests.compiler.cuda.compare import assert_matches
from tests.compiler.cuda.graphs import bind_random
from tests.compiler.cuda.test_decode import CONFIG, LAYERS

SIZE, POOL_BLOCKS = 16, 64
# Layer 1's window of 100 keys starts inside a block, well after the row's first position, and spans the chunk.
LENGTH, CHUNK, WINDOW = 150, 40, 100


@pytest.fixture(scope="module")
def chunk():
    model = LlamaForCausalLM(replace(CONFIG, windows=(None, WINDOW)))
    graph = bind_random(paged_chunk_graph(model, max_batch=4, max_positions=2048, block_size=SIZE, max_chunk=64))
    return graph, lm.compile(graph, "h100", cache=False)


def _feed() -> dict[str, np.ndarray]:
    """One row of LENGTH cached positions in shuffled blocks, and a chunk of CHUNK tokens after them."""
    rng = np.random.default_rng(0)
    table = rng.permutation(POOL_BLOCKS)[: -(-(LENGTH + CHUNK) // SIZE)].astype(np.int64)
    positions = np.arange(LENGTH, LENGTH + CHUNK)
    feed = {
        "input_ids": rng.integers(0, CONFIG.vocab_size, (1, CHUNK)),
        "position_ids": np.array([[LENGTH]], np.int64),
        "block_table": table[None, : -(-LENGTH // SIZE)],  # the blocks the cached positions fill
        "slots": (table[positions // SIZE] * SIZE + positions % SIZE)[None],
    }
    for k in range(LAYERS):
        for part in ("key", "value"):
            pool = rng.standard_normal((POOL_BLOCKS, CONFIG.kv_heads, SIZE, CONFIG.head_size))
            feed[pool_name(k, part)] = pool.astype(ml_dtypes.bfloat16)
    return feed


@pytest.mark.needs("g++")
def test_matches_the_reference(chunk):
    graph, program = chunk
    feed = _feed()
    want = lm.run(graph, {name: value.copy() for name, value in feed.items()})
    assert_matches(ShimRuntime().load(program).run(feed), want)


@pytest.mark.needs("nvcc")
def test_compiles_for_sm80_and_sm90_without_spills(chunk):
    _, program = chunk
    usages = nvcc.compile_cuda(program.source)
    assert {u.arch for u in usages} == {"80", "90"}
    assert all(u.spill_bytes == 0 for u in usages), [(u.kernel, u.spill_bytes) for u in usages if u.spill_bytes]
