"""A deployment's batching policy: how many rows a batch may hold, how long the first request may wait for
company, and which batch sizes the program was compiled for (its buckets)."""

from __future__ import annotations

import math
from dataclasses import dataclass


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is an int to Python, not a size


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int  # rows per batch (a request may carry several rows)
    # Seconds the first request of a batch waits for others. 0 batches only what is already queued.
    max_queue_delay_s: float
    # Batch sizes a batch is padded up to, smallest first; None: any size runs as it is (no padding).
    buckets: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.max_batch_size) or self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be a positive integer, got {self.max_batch_size!r}")
        delay = self.max_queue_delay_s
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
            raise ValueError(f"max_queue_delay_s must be a finite number of seconds >= 0, got {delay!r}")
        if self.buckets is None:
            return
        buckets = tuple(self.buckets)
        if not buckets:
            raise ValueError("buckets must name at least one batch size (or be None for any size)")
        if not all(_is_int(b) and b >= 1 for b in buckets):
            raise ValueError(f"buckets must be positive integers, got {buckets!r}")
        if any(a >= b for a, b in zip(buckets, buckets[1:])):
            raise ValueError(f"buckets must be strictly increasing, got {buckets!r}")
        object.__setattr__(self, "buckets", buckets)
        # A batch larger than the largest bucket could not be padded to any compiled size.
        object.__setattr__(self, "max_batch_size", min(self.max_batch_size, buckets[-1]))

    @classmethod
    def from_deployment(cls, max_batch_size: int, max_queue_delay_ms: int, buckets=None) -> BatchPolicy:
        """From a deployment's stored settings (the delay is stored in milliseconds)."""
        return cls(max_batch_size, max_queue_delay_ms / 1000, tuple(buckets) if buckets is not None else None)
