"""The sequence transport of the embedded default: one process, objects handed over, nothing to install.

Each deployment has a `WaitingLine` (the engine's own rules: priority then arrival, a bound, deadlines counted from
the request's arrival); each sequence an event channel its gateway-side reader awaits on its event loop while
workers' threads fill it. A worker takes, in line order, the sequences it may: those for no worker or for itself,
and those for another whose grace passed or who cannot take them (routing.others_may_take), if it holds their
LoRA adapter where that matters (routing.may_take_adapter).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping

from luminal.scheduler.generation.stream import Delta, Event, Failed, Started
from luminal.scheduler.generation.waiting import WaitingLine
from luminal.scheduler.sequences.adapter_board import MemoryAdapterBoard
from luminal.scheduler.sequences.base import is_last
from luminal.scheduler.sequences.load_view import LoadView
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad
from luminal.scheduler.sequences.routing import PREFERENCE_GRACE_S, may_take_adapter, others_may_take


class _Channel:
    """One sequence's events: appended by a worker's thread, read by one coroutine."""

    def __init__(self) -> None:
        self.events: deque[Event] = deque()
        self.lock = threading.Lock()
        self.waiter: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None

    def put(self, event: Event) -> None:
        _wake([self.add(event)])

    def add(self, event: Event) -> tuple[asyncio.AbstractEventLoop, asyncio.Event] | None:
        """Append `event` without waking the reader: the waiter to wake, if it waits (`_wake`)."""
        with self.lock:
            self.events.append(event)
            waiter, self.waiter = self.waiter, None
        return waiter

    async def read(self) -> list[Event]:
        """The events that arrived since the last read, waiting for at least one."""
        while True:
            with self.lock:
                if self.events:
                    taken = list(self.events)
                    self.events.clear()
                    return taken
                arrived = asyncio.Event()
                self.waiter = (asyncio.get_running_loop(), arrived)
            await arrived.wait()


def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event] | None]) -> None:
    """Wake the readers waiting, with one call into each event loop: a worker's step ends many sequences' waits at
    once, and each call from another thread writes to the loop's wakeup pipe."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Event]] = defaultdict(list)
    for waiter in waiters:
        if waiter is not None:
            by_loop[waiter[0]].append(waiter[1])
    for loop, arrived in by_loop.items():
        if not loop.is_closed():
            loop.call_soon_threadsafe(_set_all, arrived)


def _set_all(arrived: list[asyncio.Event]) -> None:
    for event in arrived:
        event.set()


class _Waiting:
    """A sequence in its deployment's waiting line: what the line's sweep may end (Expired) or drop (cancelled)."""

    def __init__(self, request: SequenceRequest, channel: _Channel, grace_until: float):
        self.request, self.channel = request, channel
        self.grace_until = grace_until  # the transport's clock: past it, any worker may take it
        self.cancelled = False

    def put(self, event: Delta | Failed) -> None:
        self.channel.put(event)


class MemorySequences:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock  # times the waiting lines' deadlines; tests give their own
        self._lock = threading.Condition()  # guards everything below; notified when a sequence is queued
        self._lines: dict[int, WaitingLine] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._taken: dict[str, int] = {}  # request id -> deployment id, while a worker runs it
        self._cancelled: set[str] = set()  # taken sequences whose client went away, until they end
        self._channels: dict[str, _Channel] = {}
        self._running: dict[int, int] = defaultdict(int)
        self._loads: dict[int, dict[str, WorkerLoad]] = defaultdict(dict)
        self._view = LoadView(self.loads)  # told of each report in `report`
        self.adapters = MemoryAdapterBoard()

    # --- gateway side ---
    def submit(self, request: SequenceRequest, max_waiting: int) -> None:
        with self._lock:
            # A sequence submitted again (its worker died before its first token) keeps its channel and reader.
            channel = self._channels.get(request.id) or _Channel()
            if request.id in self._taken:  # and the dead worker no longer runs it
                self._running[self._taken.pop(request.id)] -= 1
            waiting = _Waiting(request, channel, self.clock() + PREFERENCE_GRACE_S)
            line = self._lines.setdefault(request.deployment_id, WaitingLine(max_waiting, self.clock))
            line.max_waiting = max_waiting  # the deployment's current bound (it may have been changed)
            line.add(waiting, request.priority, request.timeout_s, request.waited_s())
            self._waiting[request.id] = waiting
            self._channels[request.id] = channel
            self._lock.notify_all()

    async def events(self, request_id: str) -> AsyncIterator[Event]:
        channel = self._channels.get(request_id)
        if channel is None:
            raise KeyError(f"no sequence {request_id!r} is known here (never submitted, or already read)")
        try:
            while True:
                for event in await channel.read():
                    yield event
                    if is_last(event):
                        return
        finally:
            with self._lock:
                self._channels.pop(request_id, None)

    def cancel(self, request_id: str) -> None:
        with self._lock:
            waiting = self._waiting.pop(request_id, None)
            if waiting is not None:
                waiting.cancelled = True  # the line's next sweep drops it
            elif request_id in self._taken:
                self._cancelled.add(request_id)
            self._channels.pop(request_id, None)

    def abandon(self, request: SequenceRequest, reason: str) -> None:
        self.emit([(request.id, Failed(reason))])

    def depth(self, deployment_id: int) -> int:
        with self._lock:
            line = self._lines.get(deployment_id)
            return 0 if line is None else sum(not w.cancelled for w in line)

    def in_flight(self, deployment_id: int) -> int:
        with self._lock:
            return self._running[deployment_id]

    def loads(self, deployment_id: int) -> dict[str, WorkerLoad]:
        with self._lock:
            return dict(self._loads[deployment_id])

    def recent_loads(self, deployment_id: int) -> Mapping[str, WorkerLoad]:
        return self._view.loads(deployment_id)

    def backlog(self, deployment_id: int) -> dict[str, int]:
        with self._lock:
            return self._backlog(deployment_id)

    def _backlog(self, deployment_id: int) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for waiting in self._lines.get(deployment_id, ()):
            if not waiting.cancelled and waiting.request.preferred_worker is not None:
                counts[waiting.request.preferred_worker] += 1
        return dict(counts)

    # --- worker side ---
    def take(
        self, deployment_id: int, worker_id: str, max_items: int, wait_s: float, worker_started_at: float | None = None
    ) -> list[SequenceRequest]:
        deadline = time.monotonic() + wait_s
        with self._lock:
            while True:
                line = self._lines.get(deployment_id)
                if line is not None:
                    line.sweep()  # the expired are ended here, never handed out
                    self._forget_swept(deployment_id, line)
                if max_items < 1:
                    return []
                chosen = line.pop_each(self._may_take(deployment_id, worker_id), max_items) if line else []
                if chosen:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._lock.wait(min(left, self._until_grace(line)))
            taken = []
            for waiting in chosen:
                waiting.channel.put(Started(worker_id, worker_started_at))
                request = waiting.request
                self._waiting.pop(request.id, None)
                self._taken[request.id] = deployment_id
                self._running[deployment_id] += 1
                taken.append(request)
            return taken

    def _may_take(self, deployment_id: int, worker_id: str) -> Callable[[_Waiting], bool]:
        """Whether `worker_id` may take a waiting sequence now: it is for no worker or for this one, or its grace
        passed or its worker cannot take it, and this one holds its LoRA adapter where that matters."""
        now, wall = self.clock(), time.time()
        loads, backlog = self._loads[deployment_id], self._backlog(deployment_id)

        def may(waiting: _Waiting) -> bool:
            preferred = waiting.request.preferred_worker
            if preferred is None or preferred == worker_id:
                return True
            if now < waiting.grace_until and not others_may_take(loads.get(preferred), backlog.get(preferred, 0), wall):
                return False
            return may_take_adapter(waiting.request.params.lora, loads.get(worker_id), loads.get(preferred), wall)

        return may

    def _until_grace(self, line: WaitingLine | None) -> float:
        """Seconds until the earliest grace of a waiting sequence ends (a take waits no longer before looking
        again); a long wait when none waits (a submit or a report wakes it)."""
        graces = [w.grace_until for w in line or ()]
        return max(0.001, min(graces) - self.clock()) if graces else 3600.0

    def _forget_swept(self, deployment_id: int, line: WaitingLine) -> None:
        """Drop the bookkeeping of the deployment's sequences the sweep removed (expired or cancelled)."""
        kept = {w.request.id for w in line}
        mine = [r for r, w in self._waiting.items() if w.request.deployment_id == deployment_id]
        for request_id in mine:
            if request_id not in kept:
                del self._waiting[request_id]

    def emit(self, events: list[tuple[str, Event]], watch: Iterable[str] = ()) -> set[str]:
        with self._lock:
            channels = [(self._channels.get(request_id), event) for request_id, event in events]
            for request_id, event in events:
                if is_last(event) and request_id in self._taken:
                    self._running[self._taken.pop(request_id)] -= 1
                    self._cancelled.discard(request_id)
        # None: its reader went away (cancelled).
        _wake([channel.add(event) for channel, event in channels if channel is not None])
        return self.cancelled(watch)

    def cancelled(self, request_ids: Iterable[str]) -> set[str]:
        with self._lock:
            return self._cancelled.intersection(request_ids)

    def report(self, deployment_id: int, worker_id: str, load: WorkerLoad | None) -> None:
        with self._lock:
            if load is None:
                self._loads[deployment_id].pop(worker_id, None)
            else:
                self._loads[deployment_id][worker_id] = load
            self._lock.notify_all()  # a worker gone or full: others may take its waiting sequences now
        self._view.published(deployment_id)

    def close(self) -> None:
        pass
