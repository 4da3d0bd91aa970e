"""The paged decode-step graph: the KV cache lives in per-layer block pools that the step reads through a block
table and writes its new keys and values into, in place.

Inputs:
  input_ids [batch, 1]                the newest token of each row
  position_ids [batch, 1]             each row's length so far: its next position, and how many keys it has
  block_table [batch, row_blocks]     each row's pool blocks in position order (unused entries: any valid block)
  slots [batch, 1]                    where this step's key and value go: block * block_size + offset
  pool.{layer}.key / .value [pool_blocks, kv_heads, block_size, head_dim]
Outputs: logits [batch, vocab] and pool.{layer}.key / .value, each the scatter of the step's key or value into
its pool. Each pool output is declared donated to the pool input of the same name (`Graph.donate`): runtimes
that honour it write the caller's array in place and hand that array back.

Attention reads each row's keys as a gather by block table, [batch, kv_heads, row_blocks * block_size, dim],
masked past the row's length, followed by the step's own key (the model appends it as it appends to any cache).
Key order does not matter to attention once positions are rotated in, so keys need not be contiguous. A
sliding window does need positions: the step's key sits at index row_blocks * block_size but position length, so
for windowed models (Mistral; Qwen2's sliding layers) the graph hands the model every key's position as well,
and each window is measured between the queries' and the keys' positions (decoding.step_mask). Graphs of models
without windows are built as before.

The chunk graph (`paged_chunk_graph`, for prefilling a prompt a chunk at a time) is the same graph with `chunk`
new tokens per row instead of one: input_ids and slots are [batch, chunk], the tokens sit at positions length,
length + 1, ..., and the models' bottom-right causal mask lets each see the cached positions and the chunk's
earlier tokens. Rows of one run bring chunks of one length.

Compiled (CPU), the gather fuses into the cache concatenation as one table load and one pool load per element:
the fusion reads the concatenation's first part under its guard (`_i2 < row_blocks * block_size`), so its axes
match the gather's, and a gather from a whole pool reads at the flat position itself (compiler/fusion/fuse.py,
compiler/kernels/lower.py). On the CPU the step still builds a [batch, kv_heads, past + 1, dim] buffer per layer, as the
concatenating step does; on CUDA the attention reads the pools through the block table itself and no such buffer
or kernel exists (compiler/gpu/attention_reads.py).
"""

from __future__ import annotations

import luminal as lm
from luminal import dtypes as dt
from luminal.hl import prim
from luminal.hl.combine import cat
from luminal.nn.models.generation import cache_layout
from luminal.nn.module import Module
from luminal.symbolic import Dim
from luminal.tensor import Tensor
from luminal.view import idx

DEFAULT_BLOCK_SIZE = 16
MAX_POOL_BLOCKS = 1 << 24
# New tokens one prefill chunk may bring per row: a chunk's compute delays every running sequence's next token.
DEFAULT_MAX_CHUNK = 256


def pool_name(layer: int, part: str) -> str:
    return f"pool.{layer}.{part}"


def paged_step_graph(
    model: Module, max_batch: int = 16, max_positions: int = 512, block_size: int = DEFAULT_BLOCK_SIZE
) -> lm.Graph:
    """The decode-step graph of a causal LM module over block pools (weights unbound, under checkpoint names)."""
    return _paged_graph(model, 1, max_batch, max_positions, block_size)


def paged_chunk_graph(
    model: Module,
    max_batch: int = 16,
    max_positions: int = 512,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_chunk: int = DEFAULT_MAX_CHUNK,
) -> lm.Graph:
    """The chunked-prefill graph: the step's inputs and outputs with `chunk` new tokens per row (a symbol up to
    `max_chunk`) at positions length, length + 1, ...; each sees the row's cached positions and, causally, the
    chunk's earlier tokens, and the logits are the chunk's last position's."""
    return _paged_graph(model, lm.sym("chunk", max=max_chunk), max_batch, max_positions, block_size)


def _paged_graph(model: Module, tokens: Dim, max_batch: int, max_positions: int, block_size: int) -> lm.Graph:
    """`tokens` new tokens per row over block pools: 1 for the decode step, a symbol for a prefill chunk."""
    layers, kv_heads, head_dim = cache_layout(model)
    dtype = getattr(model.config, "dtype", lm.float32)
    g = lm.Graph()
    batch = lm.sym("batch", max=max_batch)
    row_blocks = lm.sym("row_blocks", max=-(-max_positions // block_size))
    pool_blocks = lm.sym("pool_blocks", max=MAX_POOL_BLOCKS)
    ids = g.input("input_ids", (batch, tokens), lm.int64)
    lengths = g.input("position_ids", (batch, 1), lm.int64)
    table = g.input("block_table", (batch, row_blocks), lm.int64)
    slots = g.input("slots", (batch, tokens), lm.int64)
    pool_shape = (pool_blocks, kv_heads, block_size, head_dim)
    pools = [tuple(g.input(pool_name(k, p), pool_shape, dtype) for p in ("key", "value")) for k in range(layers)]

    past = row_blocks * block_size
    reads = _past_index(table, batch, row_blocks, kv_heads, block_size, head_dim)
    caches = [(prim.gather(key, reads), prim.gather(value, reads)) for key, value in pools]
    mask = _mask(lengths, batch, past, tokens)
    positions = _positions(lengths, batch, tokens)
    if any(w is not None for w in getattr(model.config, "windows", ())):  # windows measure by position
        logits, grown = model(ids, mask, caches, positions, _key_positions(positions, batch, past))
    else:
        logits, grown = model(ids, mask, caches, positions)
    logits[:, -1].output("logits")
    writes = _write_index(slots, batch, tokens, kv_heads, block_size, head_dim)
    for k, ((key, value), (new_key, new_value)) in enumerate(zip(pools, grown)):
        for part, pool, new in (("key", key, new_key), ("value", value, new_value)):
            prim.scatter(pool, writes, new.narrow(2, past, tokens)).output(pool_name(k, part))
            g.donate(pool_name(k, part), pool_name(k, part))
    return g


def _positions(lengths: Tensor, batch: Dim, tokens: Dim) -> Tensor:
    """int64 [batch, tokens]: each new token's position, the row's length onwards (the step's is its length)."""
    if isinstance(tokens, int) and tokens == 1:
        return lengths
    offset = prim.iota(lengths.graph, idx(1, tokens), (batch, tokens))
    return prim.broadcast_to(lengths, (batch, tokens)) + offset


def _key_positions(positions: Tensor, batch: Dim, past: Dim) -> Tensor:
    """int64 [batch, past + tokens]: the position of every key attention reads: a gathered slot's is its index
    (those past the row's length are masked), a new key's is its token's."""
    cached = prim.iota(positions.graph, idx(1, past), (batch, past))
    return cat([cached, positions], dim=1)


def _past_index(table: Tensor, batch: Dim, row_blocks: Dim, heads: int, size: int, dim: int) -> Tensor:
    """Flat pool indexes of every row's cached positions, [batch, heads, row_blocks * size, dim]."""
    shape = (batch, heads, row_blocks * size, dim)
    entry = prim.iota(table.graph, idx(0, batch) * row_blocks + idx(2, shape[2]) // size, shape)
    block = prim.gather(table, entry)
    within = prim.iota(table.graph, idx(1, heads) * (size * dim) + (idx(2, shape[2]) % size) * dim + idx(3, dim), shape)
    return block * (heads * size * dim) + within


def _write_index(slots: Tensor, batch: Dim, tokens: Dim, heads: int, size: int, dim: int) -> Tensor:
    """Flat pool indexes of the new keys or values, [batch, heads, tokens, dim]: slot = block * size + offset."""
    shape = (batch, heads, tokens, dim)
    slot = prim.broadcast_to(slots.reshape(batch, 1, tokens, 1), shape)
    offset = prim.fmod(slot, prim.full_like(slot, size))
    within = prim.iota(slots.graph, idx(1, heads) * (size * dim) + idx(3, dim), shape)
    return (slot - offset) * (heads * dim) + offset * dim + within


def _mask(lengths: Tensor, batch: Dim, past: Dim, tokens: Dim) -> Tensor:
    """int64 [batch, past + tokens]: 1 for the row's cached positions (those before its length) and the new keys
    (which of those a query sees is the model's causal mask)."""
    position = prim.iota(lengths.graph, idx(1, past), (batch, past))
    cached = prim.cast(prim.less_than(position, prim.broadcast_to(lengths, (batch, past))), dt.int64)
    return cat([cached, prim.scalar(lengths.graph, 1, dt.int64, (batch, tokens))], dim=1)
