"""The KV cache's block pool: fixed-size blocks of positions, a free list, and each sequence's block table.

Admission policy: a sequence reserves every block it can ever need (prompt plus max_tokens, rounded up to
whole blocks) when it joins the batch, so a running sequence never runs out of cache and nothing is preempted.
When the free list cannot hold a newcomer it stays waiting (its queue keeps its bound, deadline and 429 rules)
until a running sequence ends and frees its blocks, which happens the moment it finishes, is cancelled or its
client disconnects.
"""

from __future__ import annotations

from collections.abc import Hashable


class PoolTooSmall(ValueError):
    """One sequence needs more blocks than the whole pool holds: it could never run (a 400, not a wait)."""


def blocks_for(positions: int, block_size: int) -> int:
    return -(-positions // block_size)


class BlockPool:
    def __init__(self, blocks: int, block_size: int):
        if blocks < 1 or block_size < 1:
            raise ValueError(f"a block pool needs at least one block of one position, got {blocks} x {block_size}")
        self.blocks, self.block_size = blocks, block_size
        self.free: list[int] = list(range(blocks - 1, -1, -1))  # popped from the end: block 0 is handed out first
        self.tables: dict[Hashable, list[int]] = {}

    @property
    def in_use(self) -> int:
        return self.blocks - len(self.free)

    def check_fits(self, positions: int) -> None:
        """Raise PoolTooSmall when `positions` could not be held even by an empty pool."""
        need = blocks_for(positions, self.block_size)
        if need > self.blocks:
            raise PoolTooSmall(
                f"a sequence of {positions} positions needs {need} cache blocks of {self.block_size}; "
                f"the pool holds {self.blocks}"
            )

    def reserve(self, owner: Hashable, positions: int) -> bool:
        """Give `owner` blocks for `positions` positions; False (nothing taken) when too few are free."""
        if owner in self.tables:
            raise ValueError(f"{owner!r} already holds cache blocks")
        need = blocks_for(positions, self.block_size)
        if need > len(self.free):
            return False
        self.tables[owner] = [self.free.pop() for _ in range(need)]
        return True

    def release(self, owner: Hashable) -> None:
        """Return `owner`'s blocks to the free list (nothing when it holds none)."""
        self.free.extend(reversed(self.tables.pop(owner, [])))

    def slot(self, owner: Hashable, position: int) -> int:
        """The pool-wide slot (block * block_size + offset) of one of `owner`'s positions."""
        block, offset = divmod(position, self.block_size)
        return self.tables[owner][block] * self.block_size + offset
