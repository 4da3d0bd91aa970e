"""The KV cache's block pool: fixed-size blocks of positions, a free list, and each sequence's block table.

Admission policy: a sequence reserves every block it can ever need (prompt plus max_tokens, rounded up to
whole blocks) when it joins the batch, so a running sequence never runs out of cache and nothing is preempted.
When the free list cannot hold a newcomer it stays waiting (its queue keeps its bound, deadline and 429 rules)
until a running sequence ends and frees its blocks, which happens the moment it finishes, is cancelled or its
client disconnects.

Prefix sharing: a block filled entirely by prompt tokens is published under the digest of every token up to its
end once its keys and values are written (`publish`). A later sequence whose prompt starts with the same
tokens takes those blocks instead of new ones (a reference count each, never the block holding its last prompt
token, whose logits it needs), and its prefill's copy skips them, or its chunked prefill starts after them. A
sequence only ever writes positions past its shared blocks, never into one. A published block its last holder
releases stays in the index, cached, until a reservation needs its room: cached blocks count as free, and the
least recently released is taken first, so a prompt served a while ago (a chat's earlier turns, a system prompt)
is found again by the next one. `reused_tokens` counts the prompt tokens found so (never recomputed).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Sequence


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
        self.holders = [0] * blocks  # sequences holding each block
        self.shared: dict[Hashable, int] = {}  # owner -> its leading blocks taken from the index (already filled)
        self.prefixes: dict[Hashable, list[bytes]] = {}  # owner -> digests of its full prompt blocks
        self.index: dict[bytes, int] = {}  # digest of a prompt prefix -> the published block ending it
        self.digest_of: dict[int, bytes] = {}  # published block -> its digest
        self.cached: OrderedDict[int, None] = OrderedDict()  # published blocks nobody holds, least recent first
        self.reused_tokens = 0  # prompt tokens whose keys and values were found in the index, over all reserves

    @property
    def in_use(self) -> int:
        """Blocks some sequence holds (cached ones are not: they are given up when room is needed)."""
        return self.blocks - len(self.free) - len(self.cached)

    def check_fits(self, positions: int) -> None:
        """Raise PoolTooSmall when `positions` could not be held even by an empty pool."""
        need = blocks_for(positions, self.block_size)
        if need > self.blocks:
            raise PoolTooSmall(
                f"a sequence of {positions} positions needs {need} cache blocks of {self.block_size}; "
                f"the pool holds {self.blocks}"
            )

    def reserve(self, owner: Hashable, positions: int, prompt: Sequence[int] = (), namespace: bytes = b"") -> bool:
        """Give `owner` blocks for `positions` positions, the published blocks that begin `prompt` shared; False
        (nothing taken) when too few are free. Blocks are shared only within one `namespace`: a LoRA adapter
        that adapts k_proj or v_proj writes other keys and values for the same tokens."""
        if owner in self.tables:
            raise ValueError(f"{owner!r} already holds cache blocks")
        digests = prefix_digests(prompt, self.block_size, namespace)
        shared = []
        # Only blocks before the prompt's last token: its logits are computed, so its block is the sequence's own.
        for digest in digests[: (len(prompt) - 1) // self.block_size]:
            if digest not in self.index:
                break
            shared.append(self.index[digest])
        need = blocks_for(positions, self.block_size)
        revived = sum(self.holders[block] == 0 for block in shared)  # cached blocks this owner takes back
        if need - len(shared) > len(self.free) + len(self.cached) - revived:
            return False
        for block in shared:
            self.cached.pop(block, None)
        table = shared + [self._take_room() for _ in range(need - len(shared))]
        for block in table:
            self.holders[block] += 1
        self.tables[owner], self.shared[owner], self.prefixes[owner] = table, len(shared), digests
        self.reused_tokens += len(shared) * self.block_size
        return True

    def _take_room(self) -> int:
        """A block to write: a free one, else the least recently released cached one, unpublished."""
        if self.free:
            return self.free.pop()
        block, _ = self.cached.popitem(last=False)
        del self.index[self.digest_of.pop(block)]
        return block

    def publish(self, owner: Hashable) -> None:
        """`owner`'s full prompt blocks now hold their keys and values: later prompts may share them."""
        for digest, block in zip(self.prefixes.get(owner, ()), self.tables[owner]):
            if digest not in self.index:
                self.index[digest], self.digest_of[block] = block, digest

    def release(self, owner: Hashable) -> None:
        """Drop `owner`'s hold on its blocks; those nobody holds are cached when published, else free (nothing when
        it holds none). Its last blocks go first, so a prefix's tail is given up before its head."""
        self.shared.pop(owner, None)
        self.prefixes.pop(owner, None)
        for block in reversed(self.tables.pop(owner, [])):
            self.holders[block] -= 1
            if self.holders[block] == 0:
                if block in self.digest_of:
                    self.cached[block] = None
                else:
                    self.free.append(block)

    def cached_prefixes(self) -> list[bytes]:
        """The digests of every prompt prefix whose blocks this pool holds or caches: what a new prompt can share."""
        return list(self.index)

    def slot(self, owner: Hashable, position: int) -> int:
        """The pool-wide slot (block * block_size + offset) of one of `owner`'s positions."""
        block, offset = divmod(position, self.block_size)
        return self.tables[owner][block] * self.block_size + offset


def prefix_digests(prompt: Sequence[int], block_size: int, namespace: bytes = b"") -> list[bytes]:
    """The digest of each full block's prompt prefix: every token from the start to the block's end, after
    `namespace` (empty for the base model, so its digests are what they were)."""
    running, digests = hashlib.sha256(namespace), []
    for end in range(block_size, len(prompt) + 1, block_size):
        running.update(b"".join(int(t).to_bytes(8, "little", signed=True) for t in prompt[end - block_size : end]))
        digests.append(running.copy().digest())
    return digests
