"""Forming batches from a deployment's request queue (one former per worker).

The first request of a batch is waited for up to `idle_wait_s` (short, so the worker's loop notices a stop);
from the moment it was taken, the batch keeps taking requests until it holds the policy's rows or
`max_queue_delay_s` has passed, measured on the monotonic clock it is given (the system's, or a test's). A
request taken that would overflow the batch is kept (in queue order) as the start of the next batch, never
dropped and never re-queued.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from luminal.batching.layout import BatchLayout
from luminal.batching.policy import BatchPolicy
from luminal.scheduler.clock import SYSTEM_CLOCK, Clock
from luminal.scheduler.queues.base import Delivery, RequestQueue


def batch_capacity(policy: BatchPolicy, layout: BatchLayout | None) -> int:
    """Rows a batch may hold: the policy's size within what the program accepts (1 request when unbatchable)."""
    if layout is None:
        return 1
    capacity = min(policy.max_batch_size, layout.max_rows)
    return min(capacity, layout.buckets[-1]) if layout.buckets else capacity


class _Held(NamedTuple):
    delivery: Delivery
    taken_at: float  # the clock's monotonic time when it left the queue


class BatchFormer:
    def __init__(self, queue: RequestQueue, deployment_id: int, consumer: str, clock: Clock = SYSTEM_CLOCK):
        self.queue, self.deployment_id, self.consumer, self.clock = queue, deployment_id, consumer, clock
        self._carried: deque[_Held] = deque()  # taken from the queue, not yet in a batch

    @property
    def carried(self) -> int:
        """Deliveries held for the next batch (a stopping worker must finish or release them)."""
        return len(self._carried)

    def _take(self, max_items: int, wait_s: float) -> None:
        deliveries = self.queue.take(self.deployment_id, self.consumer, max_items, wait_s)
        now = self.clock.monotonic()
        self._carried.extend(_Held(d, now) for d in deliveries)

    def next_batch(self, policy: BatchPolicy, layout: BatchLayout | None, idle_wait_s: float) -> list[Delivery]:
        """The next batch's deliveries in queue order; empty when nothing arrived within `idle_wait_s`."""
        capacity = batch_capacity(policy, layout)
        if not self._carried:
            self._take(capacity, idle_wait_s)
            if not self._carried:
                return []
        deadline = self._carried[0].taken_at + policy.max_queue_delay_s
        batch: list[Delivery] = []
        rows = 0
        while True:
            while self._carried:
                request = self._carried[0].delivery.request
                extent = layout.rows_of(request) if layout is not None else None
                if extent is None or rows + extent > capacity:
                    # A request that runs alone, or one too large for the rows left: it starts the next batch,
                    # unless the batch is empty (then it is the batch, however large; the program judges it).
                    if not batch:
                        return [self._carried.popleft().delivery]
                    return batch
                batch.append(self._carried.popleft().delivery)
                rows += extent
            if rows >= capacity:
                return batch
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return batch
            # Each request brings at least one row, so more than `capacity - rows` could never all fit.
            self._take(capacity - rows, remaining)
