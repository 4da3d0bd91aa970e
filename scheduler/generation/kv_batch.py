"""The KV caches of every running sequence, kept in the engine between decode steps as one left-padded batch.

Row r of the batch is one sequence; its real positions are the last `lengths[r]` columns of the cache and of
`mask` (1 = a real key), so a step appends one column for every row at once. A sequence admitted with a longer
prompt than the batch's cache pads everyone else on the left; a finished row leaves and columns no remaining row
uses are cut from the left, so the cache is always as long as its longest sequence.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


class KVBatch:
    def __init__(self, layers: int):
        self.layers = layers
        self.caches: list[np.ndarray] = []  # per layer: key, value, key, value, ... [rows, kv_heads, width, dim]
        self.mask = np.zeros((0, 0), np.int64)  # [rows, width]
        self.lengths = np.zeros(0, np.int64)  # each row's real positions (its next position id)

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    @property
    def positions(self) -> int:
        """Cache positions held, padding included (rows x width)."""
        return self.rows * self.width

    # The cache grows with its rows: any sequence fits, nothing is reserved (the paged cache's interface).
    def check_fits(self, positions: int) -> None:
        pass

    def reserve(self, owner: Hashable, positions: int, prompt: Sequence[int] = (), namespace: bytes = b"") -> bool:
        return True

    def release(self, owner: Hashable) -> None:
        pass

    def admit(self, present: dict[str, np.ndarray], mask: np.ndarray, owners: list[Hashable] | None = None) -> None:
        """Append rows from a prefill's outputs (present.{k}.key / .value [rows, kv_heads, width, dim]) and its
        attention mask [rows, width] (left-padded: each row's real positions are its last ones)."""
        new = [present[name] for name in self._names("present")]
        mask = np.asarray(mask, np.int64)
        if self.rows == 0:
            self.caches, self.mask, self.lengths = new, mask, mask.sum(axis=1)
            return
        width = max(self.width, mask.shape[1])
        self._pad_to(width)
        pad = width - mask.shape[1]
        self.caches = [np.concatenate([c, _left_pad(n, pad)], axis=0) for c, n in zip(self.caches, new)]
        self.mask = np.concatenate([self.mask, np.pad(mask, ((0, 0), (pad, 0)))], axis=0)
        self.lengths = np.concatenate([self.lengths, mask.sum(axis=1)])

    def step_feed(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """The decode step's inputs: each row's newest token [rows, 1] after its cache."""
        feed = {
            "input_ids": tokens.reshape(-1, 1).astype(np.int64),
            "attention_mask": np.concatenate([self.mask, np.ones((self.rows, 1), np.int64)], axis=1),
            "position_ids": self.lengths[:, None].copy(),
        }
        feed.update(zip(self._names("past"), self.caches))
        return feed

    def advance(self, outputs: dict[str, np.ndarray]) -> None:
        """Take the step's grown caches: every row gained one real position."""
        self.caches = [outputs[name] for name in self._names("present")]
        self.mask = np.concatenate([self.mask, np.ones((self.rows, 1), np.int64)], axis=1)
        self.lengths = self.lengths + 1

    def remove(self, rows: list[int]) -> None:
        """Drop finished rows (freeing their cache) and the columns only they used."""
        if not rows:
            return
        keep = np.setdiff1d(np.arange(self.rows), rows)
        self.caches = [c[keep] for c in self.caches]
        self.mask, self.lengths = self.mask[keep], self.lengths[keep]
        width = int(self.lengths.max()) if len(keep) else 0
        self.caches = [np.ascontiguousarray(c[:, :, c.shape[2] - width :]) for c in self.caches]
        self.mask = self.mask[:, self.width - width :]

    def _pad_to(self, width: int) -> None:
        pad = width - self.width
        if pad:
            self.caches = [_left_pad(c, pad) for c in self.caches]
            self.mask = np.concatenate([np.zeros((self.rows, pad), np.int64), self.mask], axis=1)

    def _names(self, prefix: str) -> list[str]:
        return [f"{prefix}.{k}.{part}" for k in range(self.layers) for part in ("key", "value")]


def _left_pad(cache: np.ndarray, pad: int) -> np.ndarray:
    if pad == 0:
        return cache
    zeros = np.zeros((cache.shape[0], cache.shape[1], pad, cache.shape[3]), cache.dtype)
    return np.concatenate([zeros, cache], axis=2)
