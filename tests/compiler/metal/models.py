"""The test models the Metal checks compile beside the CUDA tests' cases (tests/compiler/cuda/graphs.py): a
MiniLM-shaped BERT encoder, and a Llama decoder's prefill and decode step (float32; the prefill in bfloat16, the
step in bfloat16 and float16: their activations stored in half types, compiler/kernels/half_activations.py), all tiny,
with random weights and their feeds."""

from __future__ import annotations

from typing import Callable

import numpy as np

import luminal as lm
from luminal.nn.models.bert import BertConfig, bert_graph
from luminal.nn.models.generation import decoder_graphs
from luminal.nn.models.llama import LlamaConfig, LlamaForCausalLM
from luminal.nn.models.paged_decoding import paged_step_graph
from tests.compiler.cuda.graphs import Case, bind_random

# MiniLM-L6's shape (6 layers of 384 wide, 12 heads, 1536 inner), shrunk: 2 layers, 32 wide, 4 heads.
MINILM = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=16)  # fmt: skip
# Llama's shape (GQA: 2 key/value heads for 4 query heads, SiLU MLP, RMS norm, rope), shrunk.
LLAMA = dict(vocab_size=40, hidden_size=24, intermediate_size=36, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)  # fmt: skip


def minilm() -> Case:
    g, rng = bert_graph(BertConfig(**MINILM), max_batch=4, max_seq=16), np.random.default_rng(20)
    mask = np.ones((2, 7), np.int64)
    mask[1, 5:] = 0
    feed = {"input_ids": rng.integers(0, 50, (2, 7)), "attention_mask": mask}
    return bind_random(g), feed | {"token_type_ids": np.zeros((2, 7), np.int64)}


def _llama(dtype: lm.DType = lm.float32, layers: int = 2):
    config = LlamaConfig(**(LLAMA | {"num_hidden_layers": layers}), dtype=dtype)
    return decoder_graphs(LlamaForCausalLM(config), max_batch=2, max_positions=16)


def _prefill(dtype: lm.DType, layers: int = 2) -> Case:
    graphs, rng = _llama(dtype, layers), np.random.default_rng(21)
    return bind_random(graphs.prefill), {"input_ids": rng.integers(0, 40, (2, 5))}


def llama_prefill() -> Case:
    return _prefill(lm.float32)


def llama_prefill_bf16() -> Case:  # one layer: the second adds no kernel shape, only build time
    return _prefill(lm.bfloat16, layers=1)


def _step(dtype: lm.DType, layers: int = 2) -> Case:
    graphs, rng = _llama(dtype, layers), np.random.default_rng(22)
    g, feed = bind_random(graphs.step), {"input_ids": rng.integers(0, 40, (2, 1))}
    for label in g.inputs:
        if label.startswith("past."):  # [batch, kv_heads, past, head_dim] caches of 6 earlier positions
            feed[label] = (rng.standard_normal((2, 2, 6, 6)) * 0.5).astype(np.float32).astype(dtype.np)
    return g, feed


def llama_decode() -> Case:
    return _step(lm.float32)


def llama_decode_bf16() -> Case:
    return _step(lm.bfloat16)


def llama_decode_fp16() -> Case:
    return _step(lm.float16, layers=1)


MODELS: dict[str, Callable[[], Case]] = {
    f.__name__: f
    for f in (minilm, llama_prefill, llama_prefill_bf16, llama_decode, llama_decode_bf16, llama_decode_fp16)
}


PAGED_BLOCK, PAGED_POOL_BLOCKS = 4, 12  # positions per pool block, blocks per pool


def paged_step() -> lm.Graph:
    """The paged decode step (luminal/nn/models/paged_decoding.py) of a one-layer bf16 Llama: each layer's key and
    value pools are donated inputs its scatters write in place."""
    model = LlamaForCausalLM(LlamaConfig(**(LLAMA | {"num_hidden_layers": 1}), dtype=lm.bfloat16))
    return bind_random(paged_step_graph(model, max_batch=2, max_positions=16, block_size=PAGED_BLOCK))


def paged_feed(graph: lm.Graph, lengths: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of the given lengths, each row's blocks at shuffled places in the pools (bf16 values)."""
    rng = np.random.default_rng(seed)
    row_blocks = max(n // PAGED_BLOCK + 1 for n in lengths)
    table = rng.permutation(PAGED_POOL_BLOCKS)[: len(lengths) * row_blocks].reshape(len(lengths), row_blocks)
    at = np.array(lengths, np.int64).reshape(-1, 1)
    slots = np.take_along_axis(table, at // PAGED_BLOCK, 1) * PAGED_BLOCK + at % PAGED_BLOCK
    feed = {"input_ids": rng.integers(0, 40, (len(lengths), 1)), "position_ids": at, "slots": slots}
    feed["block_table"] = table.astype(np.int64)
    for label in graph.inputs:
        if label.startswith("pool."):  # [pool_blocks, kv_heads, block, head_dim]
            pool = rng.standard_normal((PAGED_POOL_BLOCKS, 2, PAGED_BLOCK, 6)) * 0.5
            feed[label] = pool.astype(lm.bfloat16.np)
    return feed
