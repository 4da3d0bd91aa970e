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
Key order does not matter to attention once positions are rotated in, so keys need not be contiguous.

Compiled (CPU), the gather fuses into the cache concatenation as one table load and one pool load per element:
the fusion reads the concatenation's first part under its guard (`_i2 < row_blocks * block_size`), so its axes
match the gather's, and a gather from a whole pool reads at the flat position itself (compiler/fuse.py,
compiler/lower.py). On the CPU the step still builds a [batch, kv_heads, past + 1, dim] buffer per layer, as the
concatenating step does; on CUDA the attention reads the pools through the block table itself and no such buffer
or kernel exists (compiler/cuda/attention_reads.py).
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


def pool_name(layer: int, part: str) -> str:
    return f"pool.{layer}.{part}"


def paged_step_graph(
    model: Module, max_batch: int = 16, max_positions: int = 512, block_size: int = DEFAULT_BLOCK_SIZE
) -> lm.Graph:
    """The decode-step graph of a causal LM module over block pools (weights unbound, under checkpoint names)."""
    if any(w is not None for w in getattr(model.config, "windows", ())):
        raise NotImplementedError("paged decoding: sliding-window attention is not built (its mask needs positions)")
    layers, kv_heads, head_dim = cache_layout(model)
    dtype = getattr(model.config, "dtype", lm.float32)
    g = lm.Graph()
    batch = lm.sym("batch", max=max_batch)
    row_blocks = lm.sym("row_blocks", max=-(-max_positions // block_size))
    pool_blocks = lm.sym("pool_blocks", max=MAX_POOL_BLOCKS)
    ids = g.input("input_ids", (batch, 1), lm.int64)
    lengths = g.input("position_ids", (batch, 1), lm.int64)
    table = g.input("block_table", (batch, row_blocks), lm.int64)
    slots = g.input("slots", (batch, 1), lm.int64)
    pool_shape = (pool_blocks, kv_heads, block_size, head_dim)
    pools = [tuple(g.input(pool_name(k, p), pool_shape, dtype) for p in ("key", "value")) for k in range(layers)]

    past = row_blocks * block_size
    reads = _past_index(table, batch, row_blocks, kv_heads, block_size, head_dim)
    caches = [(prim.gather(key, reads), prim.gather(value, reads)) for key, value in pools]
    logits, grown = model(ids, _mask(lengths, batch, past), caches, lengths)
    logits[:, -1].output("logits")
    writes = _write_index(slots, batch, kv_heads, block_size, head_dim)
    for k, ((key, value), (new_key, new_value)) in enumerate(zip(pools, grown)):
        for part, pool, new in (("key", key, new_key), ("value", value, new_value)):
            prim.scatter(pool, writes, new.narrow(2, past, 1)).output(pool_name(k, part))
            g.donate(pool_name(k, part), pool_name(k, part))
    return g


def _past_index(table: Tensor, batch: Dim, row_blocks: Dim, heads: int, size: int, dim: int) -> Tensor:
    """Flat pool indexes of every row's cached positions, [batch, heads, row_blocks * size, dim]."""
    shape = (batch, heads, row_blocks * size, dim)
    entry = prim.iota(table.graph, idx(0, batch) * row_blocks + idx(2, shape[2]) // size, shape)
    block = prim.gather(table, entry)
    within = prim.iota(table.graph, idx(1, heads) * (size * dim) + (idx(2, shape[2]) % size) * dim + idx(3, dim), shape)
    return block * (heads * size * dim) + within


def _write_index(slots: Tensor, batch: Dim, heads: int, size: int, dim: int) -> Tensor:
    """Flat pool indexes of this step's key or value, [batch, heads, 1, dim]: slot = block * size + offset."""
    shape = (batch, heads, 1, dim)
    slot = prim.broadcast_to(slots.reshape(batch, 1, 1, 1), shape)
    offset = prim.fmod(slot, prim.full_like(slot, size))
    within = prim.iota(slots.graph, idx(1, heads) * (size * dim) + idx(3, dim), shape)
    return (slot - offset) * (heads * dim) + offset * dim + within


def _mask(lengths: Tensor, batch: Dim, past: Dim) -> Tensor:
    """int64 [batch, past + 1]: 1 for the row's cached positions (those before its length) and this step's key."""
    position = prim.iota(lengths.graph, idx(1, past), (batch, past))
    cached = prim.cast(prim.less_than(position, prim.broadcast_to(lengths, (batch, past))), dt.int64)
    return cat([cached, prim.full_like(lengths, 1)], dim=1)
