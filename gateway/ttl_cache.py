"""A small time-bounded cache for the hot path's metadata lookups (API key -> tenant, model name -> ready
deployment), so a steady stream of inference requests does not query the database twice per request.

Entries live `ttl_s` seconds. Changes made through this gateway clear the cache at once (`clear()`), and so do
changes made through another replica, told over Redis (metadata_changes.py); the time limit bounds how long a
replica cut off from Redis may act on a revoked key or a deleted deployment. Thread-safe: lookups run on the
event loop, fills may come from threads.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class TtlCache(Generic[V]):
    def __init__(self, ttl_s: float, max_entries: int = 10_000):
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._entries: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = 0  # bumped by clear(): a fill started before a clear must not land after it

    def generation(self) -> int:
        return self._generation

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if time.monotonic() >= entry[0]:
                del self._entries[key]
                return None
            return entry[1]

    def put(self, key: Hashable, value: V, generation: int) -> None:
        """Store a value read while the cache was at `generation` (read it before the lookup)."""
        with self._lock:
            if generation != self._generation or self.ttl_s <= 0:
                return
            self._entries[key] = (time.monotonic() + self.ttl_s, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._generation += 1
