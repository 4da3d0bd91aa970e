"""The request queue interface: per-deployment bounded queues between the gateway and the workers.

Gateway side: `submit` or `enqueue` (admission: raises `QueueFull` instead of waiting) and `wait_result`. Worker side:
`take` (a batch's worth, most urgent first, expired requests answered 504 and never returned), `complete`
(store the result, then acknowledge; `complete_all` for a batch at once), `reclaim` (take over what a dead
worker took and never completed).
Backends: `MemoryQueue` (the embedded default, one process) and `RedisStreamsQueue` (`LUMINAL_QUEUE_URL=
redis://...`: consumer groups, acknowledgement after the result is stored). The same tests run on both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.work import InferenceRequest, InferenceResult


class QueueFull(Exception):
    """Admission refused: the deployment's queue holds `max_depth` requests. The gateway answers 429."""

    def __init__(self, deployment_id: int, depth: int, retry_after_s: float):
        super().__init__(
            f"deployment {deployment_id} has {depth} requests queued, its limit; retry in {retry_after_s:g} s"
        )
        self.deployment_id, self.depth, self.retry_after_s = deployment_id, depth, retry_after_s


class ResultTimeout(Exception):
    """No result arrived in time (the gateway answers 504)."""


@dataclass
class Delivery:
    """A request handed to one consumer; `tag` identifies the delivery for acknowledgement."""

    request: InferenceRequest
    tag: str
    attempts: int = 1  # deliveries so far, reclaims included
    # Wall-clock seconds when this consumer took it: its queue wait ends here and its batch forming starts (traces).
    taken_at: float = field(default_factory=time.time)


class RequestQueue(Protocol):
    # Whether complete_all stores a batch's usage record with its answers (Redis: a drainer then writes it to the
    # database); a worker on a queue that does not is given a ledger to write it to before it answers.
    stores_usage: bool

    # --- gateway side ---
    def submit(self, request: InferenceRequest, max_depth: int) -> None:
        """Queue the request or raise QueueFull; never blocks on a full queue."""
        ...

    async def enqueue(self, request: InferenceRequest, max_depth: int) -> None:
        """`submit` for the gateway's event loop: it serves other requests while a remote admission runs."""
        ...

    async def wait_result(self, request_id: str, timeout: float) -> InferenceResult:
        """The request's result, once; raises ResultTimeout after `timeout` seconds. A result that arrives with
        nobody waiting (before the call, or after a waiter gave up) is kept for a later call for a while (the
        backend's result TTL), then dropped."""
        ...

    def depth(self, deployment_id: int) -> int:
        """Requests queued and not yet taken by a worker."""
        ...

    def in_flight(self, deployment_id: int) -> int:
        """Requests taken by a worker and not yet completed."""
        ...

    # --- worker side ---
    def take(self, deployment_id: int, consumer: str, max_items: int, wait_s: float) -> list[Delivery]:
        """Up to `max_items` requests, most urgent first and FIFO within a level, waiting up to `wait_s` for
        the first; requests whose deadline has passed are completed with EXPIRED here and never returned."""
        ...

    def complete(self, delivery: Delivery, result: InferenceResult) -> None:
        """Store the result where `wait_result` finds it, then acknowledge the delivery (in that order, so a
        crash between the two re-delivers instead of losing the request). A delivery already completed (by a
        consumer presumed dead that finished after its work was reclaimed) is ignored: the first result wins."""
        ...

    def complete_all(
        self, completions: list[tuple[Delivery, InferenceResult]], usage: UsageRecord | None = None
    ) -> None:
        """`complete` for each (delivery, result) pair, in one step where the backend can (one round trip to
        Redis for a whole batch); each pair is stored and acknowledged as `complete` would. `usage`, the batch's
        usage record, only where `stores_usage`: stored in the same atomic step as the answers."""
        ...

    def reclaim(self, deployment_id: int, consumer: str, min_idle_s: float, max_items: int) -> list[Delivery]:
        """Deliveries taken (by any consumer) at least `min_idle_s` ago and never completed, now owned by
        `consumer` with `attempts` counting this delivery too; expired ones are completed with EXPIRED instead."""
        ...

    def close(self) -> None: ...
