"""The running sequences' KV caches in block pools that stay in the engine: one key and one value pool per
layer, [pool blocks, kv heads, block size, head dim], handed to every decode step and written by it in place
(the step graph's pool outputs are donated pool inputs: `luminal.nn.models.paged_decoding`). The pools live in
the memory space of the runtime that runs the programs (memory_space.py): numpy arrays on the host, device arrays
on a CUDA worker, which never cross to the host.

Row r of the batch is one sequence: its length (cached positions) and its blocks (`BlockPool` tables). A
prefill's left-padded caches are copied into the newcomers' blocks once, at admission, or a model with a chunk
program writes newcomers' prompts into their blocks a chunk at a time (`chunk_feed`) before they join the rows
(`join`); after that the engine never copies a cache: a step writes one position per row, and a finished row
just gives its blocks back.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from luminal.nn.models.paged_decoding import pool_name
from luminal.scheduler.generation.block_pool import BlockPool
from luminal.scheduler.generation.memory_space import DeviceMemory, HostMemory


class PagedCache:
    def __init__(self, layers: int, pool_shape: tuple[int, int, int, int], dtype: np.dtype,
                 memory: HostMemory | DeviceMemory | None = None):  # fmt: skip
        """pool_shape: (blocks, kv_heads, block_size, head_dim) of every pool, held in `memory` (the programs'
        memory space, memory_space.py: host numpy arrays unless given)."""
        blocks, _, block_size, _ = pool_shape
        self.layers = layers
        self.pool = BlockPool(blocks, block_size)
        self.memory = HostMemory() if memory is None else memory
        # Zeros, not garbage: a masked position still multiplies its value by a zero weight, and 0 * nan is nan.
        self.pools = {
            pool_name(k, p): self.memory.zeros(pool_shape, dtype) for k in range(layers) for p in ("key", "value")
        }
        self.owners: list[Hashable] = []  # row r's sequence
        self.lengths = np.zeros(0, np.int64)  # row r's cached positions

    @property
    def rows(self) -> int:
        return len(self.owners)

    @property
    def positions(self) -> int:
        return int(self.lengths.sum())

    def check_fits(self, positions: int) -> None:
        self.pool.check_fits(positions)

    def reserve(self, owner: Hashable, positions: int, prompt: Sequence[int] = (), namespace: bytes = b"") -> bool:
        return self.pool.reserve(owner, positions, prompt, namespace)

    def release(self, owner: Hashable) -> None:
        self.pool.release(owner)

    def admit(self, present: dict[str, np.ndarray], mask: np.ndarray, owners: list[Hashable]) -> None:
        """Copy a prefill's caches (present.{k}.key / .value [rows, kv_heads, width, dim], left-padded as `mask`
        [rows, width] says) into the blocks each owner reserved, except the shared ones already holding them,
        publish its full prompt blocks, and add the rows."""
        lengths = np.asarray(mask, np.int64).sum(axis=1)
        size = self.pool.block_size
        for r, (owner, length) in enumerate(zip(owners, lengths)):
            width, table = mask.shape[1], self.pool.tables[owner]
            for b in range(self.pool.shared[owner], -(-int(length) // size)):
                block, start = table[b], width - length + b * size
                stop = min(start + size, width)
                for k in range(self.layers):
                    for part in ("key", "value"):
                        cache = present[f"present.{k}.{part}"]
                        pool, values = self.pools[pool_name(k, part)], cache[r, :, start:stop]
                        self.memory.write(pool, (block, slice(None), slice(0, stop - start)), values)
            self.pool.publish(owner)
        self.owners.extend(owners)
        self.lengths = np.concatenate([self.lengths, lengths])

    def chunk_feed(self, rows: Sequence[tuple[Hashable, Sequence[int], int]]) -> dict[str, np.ndarray]:
        """The chunk program's inputs for sequences not yet in the rows, one row each: (owner, tokens, start), the
        owner's `tokens` at positions start.., the `start` before them already in its blocks. Every row's chunk
        holds as many tokens (the program's `chunk` is one symbol)."""
        size = self.pool.block_size
        if len({len(tokens) for _, tokens, _ in rows}) != 1:
            raise ValueError(f"one chunk-program run takes chunks of one length, got {[len(t) for _, t, _ in rows]}")
        for owner, tokens, start in rows:
            if start + len(tokens) > len(self.pool.tables[owner]) * size:
                raise ValueError(f"positions {start}..{start + len(tokens) - 1} lie past {owner!r}'s blocks")
        # Blocks holding the most cached positions of a row (one, if none); past a row's own: its first, masked.
        width = max(max(-(-start // size) for _, _, start in rows), 1)
        table = np.empty((len(rows), width), np.int64)
        for r, (owner, _, start) in enumerate(rows):
            blocks = self.pool.tables[owner][: max(-(-start // size), 1)]
            table[r, : len(blocks)], table[r, len(blocks) :] = blocks, blocks[0]
        slots = [[self.pool.slot(owner, p) for p in range(start, start + len(tokens))] for owner, tokens, start in rows]
        feed = {
            "input_ids": np.array([list(tokens) for _, tokens, _ in rows], np.int64),
            "position_ids": np.array([[start] for _, _, start in rows], np.int64),
            "block_table": table,
            "slots": np.array(slots, np.int64),
        }
        feed.update(self.pools)
        return feed

    def join(self, owner: Hashable, length: int) -> None:
        """`owner`'s first `length` positions (its prompt) are in its blocks: publish its full prompt blocks and
        add its row."""
        self.pool.publish(owner)
        self.owners.append(owner)
        self.lengths = np.append(self.lengths, np.int64(length))

    def keep_pools(self, outputs: dict[str, np.ndarray]) -> None:
        """The pools a program handed back: the same arrays from a runtime that writes in place, new ones from one
        that copies."""
        for name in self.pools:
            self.pools[name] = outputs[name]

    def step_feed(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """The paged step's inputs: each row's newest token, its length, its blocks and where its new key goes."""
        size = self.pool.block_size
        width = max(-(-int(self.lengths.max()) // size), 1)  # blocks holding the longest row's cached positions
        table = np.empty((self.rows, width), np.int64)
        for r, owner in enumerate(self.owners):
            blocks = self.pool.tables[owner][:width]
            table[r, : len(blocks)], table[r, len(blocks) :] = blocks, blocks[0]  # past a row's length: masked
        slots = [self.pool.slot(owner, int(n)) for owner, n in zip(self.owners, self.lengths)]
        feed = {
            "input_ids": tokens.reshape(-1, 1).astype(np.int64),
            "position_ids": self.lengths[:, None].copy(),
            "block_table": table,
            "slots": np.array(slots, np.int64)[:, None],
        }
        feed.update(self.pools)
        return feed

    def advance(self, outputs: dict[str, np.ndarray]) -> None:
        """Every row gained one cached position. A runtime that writes in place hands the same pools back; one
        that copies hands new ones, which are kept instead."""
        self.keep_pools(outputs)
        self.lengths = self.lengths + 1

    def remove(self, rows: list[int]) -> None:
        """Drop rows, their blocks back in the free list at once."""
        if not rows:
            return
        gone = set(rows)
        for r in rows:
            self.release(self.owners[r])
        self.owners = [o for r, o in enumerate(self.owners) if r not in gone]
        self.lengths = np.delete(self.lengths, rows)
