"""The embedded platform's request queue: everything in this process, no external service.

The gateway side (`submit`, `wait_result`) runs on an asyncio event loop; the worker side (`take`, `complete`,
`reclaim`) runs in plain threads. One lock guards all state. A worker waits on its deployment's own condition
(of that lock), so a request wakes only the workers that can take it: with one condition for all, every
request and every answer woke every worker thread of the process, each taking the GIL to find nothing. A waiting
gateway coroutine is woken through its loop's `call_soon_threadsafe`, since a worker thread may not touch an
asyncio future directly.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.queues.base import Delivery, QueueFull, ResultTimeout
from luminal.scheduler.work import InferenceRequest, InferenceResult, effective_priority, expired_result

# A result nobody waits for (the waiter gave up, or the gateway replica that would wait died) is kept this long
# in case a waiter comes (an async prediction polled later), then dropped, so results cannot pile up.
DEFAULT_RESULT_TTL_S = 600.0
# What a refused client is told to wait before retrying: the queue cannot know how fast the deployment drains,
# and about a second is the order of one batch's queue delay plus execution.
DEFAULT_RETRY_AFTER_S = 1.0


@dataclass
class _Taken:
    delivery: Delivery
    consumer: str
    taken_at: float  # monotonic


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


class MemoryQueue:
    stores_usage = False

    def __init__(self, result_ttl_s: float = DEFAULT_RESULT_TTL_S, retry_after_s: float = DEFAULT_RETRY_AFTER_S):
        self._result_ttl_s = result_ttl_s
        self._retry_after_s = retry_after_s
        self._lock = threading.RLock()
        self._arrivals: dict[int, threading.Condition] = {}  # deployment -> what its workers wait on
        self._sequence = itertools.count()  # ties within a priority level break by arrival: FIFO
        self._queued: dict[int, list[tuple[int, int, InferenceRequest]]] = {}  # deployment -> heap
        self._taken: dict[str, _Taken] = {}  # tag -> who holds it; insertion order = oldest delivery first
        self._results: OrderedDict[str, tuple[InferenceResult, float]] = OrderedDict()  # id -> (result, stored)
        self._waiters: dict[str, _Waiter] = {}
        self._closed = False

    # --- gateway side ---

    def submit(self, request: InferenceRequest, max_depth: int) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {max_depth}")
        level = effective_priority(request.priority)
        with self._lock:
            self._check_open()
            heap = self._queued.setdefault(request.deployment_id, [])
            if len(heap) >= max_depth:
                raise QueueFull(request.deployment_id, len(heap), self._retry_after_s)
            heapq.heappush(heap, (level, next(self._sequence), request))
            self._arrival(request.deployment_id).notify_all()

    async def enqueue(self, request: InferenceRequest, max_depth: int) -> None:
        self.submit(request, max_depth)  # nothing to wait for: the queue is in this process

    async def wait_result(self, request_id: str, timeout: float) -> InferenceResult:
        loop = asyncio.get_running_loop()
        with self._lock:
            self._drop_stale_results()
            if request_id in self._results:
                return self._results.pop(request_id)[0]
            if request_id in self._waiters:
                raise ValueError(f"request {request_id} already has a waiter; a result is delivered once")
            waiter = self._waiters[request_id] = _Waiter(loop, loop.create_future())
        # A timer, not asyncio.wait (which builds a waiter future, a set and callbacks per call): at the timeout
        # it resolves the future with None unless a worker has claimed the waiter, whose result is then on its way.
        timer = loop.call_later(max(timeout, 0.0), self._expire, request_id, waiter)
        try:
            result = await waiter.future
        finally:
            timer.cancel()
            with self._lock:
                if self._waiters.get(request_id) is waiter:  # this coroutine was cancelled (the client went away)
                    del self._waiters[request_id]
        if result is None:
            raise ResultTimeout(f"no result for request {request_id} within {timeout:g} s")
        return result

    def _expire(self, request_id: str, waiter: _Waiter) -> None:
        """On the waiter's loop, at its timeout: it gives up, unless a worker already took its result to deliver."""
        with self._lock:
            if self._waiters.get(request_id) is not waiter:
                return
            del self._waiters[request_id]
        _resolve(waiter.future, None)

    def depth(self, deployment_id: int) -> int:
        with self._lock:
            return len(self._queued.get(deployment_id, ()))

    def in_flight(self, deployment_id: int) -> int:
        with self._lock:
            return sum(1 for t in self._taken.values() if t.delivery.request.deployment_id == deployment_id)

    # --- worker side ---

    def take(self, deployment_id: int, consumer: str, max_items: int, wait_s: float) -> list[Delivery]:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        give_up_at = time.monotonic() + max(wait_s, 0.0)
        with self._lock:
            while not self._closed:  # a worker blocked here at shutdown gets nothing, then sees its own stop flag
                taken = self._pop_live(deployment_id, consumer, max_items)
                remaining = give_up_at - time.monotonic()
                if taken or remaining <= 0:
                    return taken
                self._arrival(deployment_id).wait(remaining)
            return []

    def complete(self, delivery: Delivery, result: InferenceResult) -> None:
        """Stores the result, then acknowledges. A delivery completed before (by a consumer that was presumed dead
        and reclaimed from) is ignored, so each request has one result."""
        with self._lock:
            if self._taken.pop(delivery.tag, None) is None:
                return
            self._publish(result)

    def complete_all(
        self, completions: list[tuple[Delivery, InferenceResult]], usage: UsageRecord | None = None
    ) -> None:
        if usage is not None:
            raise ValueError("the in-process queue does not store usage records: give the worker a ledger")
        with self._lock:
            for delivery, result in completions:
                if self._taken.pop(delivery.tag, None) is not None:
                    self._publish(result)

    def reclaim(self, deployment_id: int, consumer: str, min_idle_s: float, max_items: int) -> list[Delivery]:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        now, claimed = time.monotonic(), []
        with self._lock:
            for tag, held in list(self._taken.items()):
                if len(claimed) == max_items:
                    break
                if held.delivery.request.deployment_id != deployment_id or now - held.taken_at < min_idle_s:
                    continue
                del self._taken[tag]
                request = held.delivery.request
                if request.expired():
                    self._publish(expired_result(request))
                    continue
                delivery = Delivery(request, tag, held.delivery.attempts + 1)
                self._taken[tag] = _Taken(delivery, consumer, now)  # re-inserted: now the newest delivery
                claimed.append(delivery)
        return claimed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for arrival in self._arrivals.values():
                arrival.notify_all()

    # --- internals (called with the lock held) ---

    def _arrival(self, deployment_id: int) -> threading.Condition:
        arrival = self._arrivals.get(deployment_id)
        if arrival is None:
            arrival = self._arrivals[deployment_id] = threading.Condition(self._lock)
        return arrival

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the queue is closed")

    def _pop_live(self, deployment_id: int, consumer: str, max_items: int) -> list[Delivery]:
        heap, taken = self._queued.get(deployment_id, []), []
        now = time.time()
        while heap and len(taken) < max_items:
            _, sequence, request = heapq.heappop(heap)
            if request.expired(now):
                self._publish(expired_result(request))
                continue
            delivery = Delivery(request, tag=f"{deployment_id}-{sequence}")
            self._taken[delivery.tag] = _Taken(delivery, consumer, time.monotonic())
            taken.append(delivery)
        return taken

    def _publish(self, result: InferenceResult) -> None:
        self._drop_stale_results()
        waiter = self._waiters.pop(result.request_id, None)
        if waiter is None:
            self._results[result.request_id] = (result, time.monotonic())
            return
        try:
            waiter.loop.call_soon_threadsafe(_resolve, waiter.future, result)
        except RuntimeError:  # the waiter's event loop is closed: nobody is left to answer
            pass

    def _drop_stale_results(self) -> None:
        cutoff = time.monotonic() - self._result_ttl_s
        while self._results:
            request_id, (_, stored_at) = next(iter(self._results.items()))
            if stored_at > cutoff:
                break  # stored in time order, so every later result is fresher
            del self._results[request_id]


def _resolve(future: asyncio.Future, result: InferenceResult | None) -> None:
    if not future.done():
        future.set_result(result)
