"""Forming batches from a deployment's request queue (one former per worker).

A free worker takes what is queued (waiting up to `idle_wait_s` for a first request when nothing is, short so
the worker's loop notices a stop) and runs it at once: at low load nobody pays the queue delay. It waits for more
only when its last batch says more is coming: a batch holding fewer rows than the last one waits for company,
until it holds as many, is full, or `max_queue_delay_s` has passed since its first request was taken (the
monotonic clock it is given: the system's, or a test's). So under load batches keep their size (requests that
arrived while the last batch ran fill the next), and a worker that saw nothing within `idle_wait_s` forgets the
load it saw. Anchors: Triton's max_queue_delay and Ray Serve's batch_wait_timeout_s bound the wait; vLLM's step
loop runs what is there whenever the engine is free.

A request taken that would overflow the batch is kept (in queue order) as the start of the next batch, never
dropped and never re-queued.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from luminal.batching.layout import BatchLayout
from luminal.batching.policy import BatchPolicy
from luminal.batching.requests import Delivery, DeliverySource
from luminal.store.clock import SYSTEM_CLOCK, Clock


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
    def __init__(self, queue: DeliverySource, deployment_id: int, consumer: str, clock: Clock = SYSTEM_CLOCK):
        self.queue, self.deployment_id, self.consumer, self.clock = queue, deployment_id, consumer, clock
        self._carried: deque[_Held] = deque()  # taken from the queue, not yet in a batch
        # Rows of the last batch formed: the load this worker last saw, so the rows worth waiting for. 1 (never
        # wait) at the start and after an idle wait that found nothing.
        self._expected_rows = 1

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
                self._expected_rows = 1  # idle for a whole wait: the load the last batches saw has gone
                return []
        deadline = self._carried[0].taken_at + policy.max_queue_delay_s
        worth_waiting_for = min(capacity, self._expected_rows)
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
                    break
                batch.append(self._carried.popleft().delivery)
                rows += extent
            if self._carried or rows >= worth_waiting_for or self.clock.monotonic() >= deadline:
                self._expected_rows = rows
                return batch
            # Each request brings at least one row, so more than `capacity - rows` could never all fit.
            self._take(capacity - rows, deadline - self.clock.monotonic())
