"""The gateway's side of one sequence: it reads the sequence's events from the transport and keeps what the
answer needs (tokens counted, whether its prompt was read, the worker that took it).

It also bounds every wait. Before a worker takes the sequence, the wait lasts until the sequence's waiting deadline
(none running, all busy): then it is cancelled and ends as expired, as one that waited past it in an engine's line
does. Once a worker took it, a silence of `watch_s` makes the relay ask whether that worker still lives
(`worker_alive`, the registry's view, told which process took it: one restarted under its old name since, as a
pod's container or a VM's service is, registers another and never saw the sequence); a dead worker's sequence
that had sent nothing is submitted again for another worker (its new worker bills it, once: records are keyed by
request id), and one that had sent tokens ends with a failure naming the worker's death, never a silent truncation
or a hang; the relay bills the tokens it delivered under the dead worker's id (`bill`, cut_short.py), since a dead
worker bills nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable

from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.generation.stream import (
    Delta,
    Event,
    Failed,
    GenerationFailed,
    Started,
    WaitExpired,
    expired_message,
    raise_failure,
)
from luminal.scheduler.generation.waiting import MAX_WAITING, EngineBusy
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.cut_short import CutShort, cut_short_record
from luminal.scheduler.sequences.inbox import Inbox
from luminal.scheduler.sequences.request import SequenceRequest

log = logging.getLogger(__name__)
WATCH_S = 0.5  # how long a relay waits for its worker's next event before it asks whether the worker lives


class RelayedStream:
    def __init__(
        self,
        transport: SequenceTransport,
        request: SequenceRequest,
        # (worker id, Started.worker_started_at: which process under that id took it) -> whether that process lives;
        # blocking (a registry read): run off the event loop
        worker_alive: Callable[[str, float | None], bool] | None = None,
        max_waiting: int = MAX_WAITING,  # the deployment's bound, for a resubmission
        watch_s: float = WATCH_S,
        bill: Callable[[UsageRecord], object] | None = None,  # blocking (a ledger write): run off the event loop
    ):
        self.transport, self.request = transport, request
        self.worker_alive, self.max_waiting, self.watch_s = worker_alive, max_waiting, watch_s
        self.bill = bill
        self.taken_at: float | None = None  # wall-clock seconds when its worker's Started arrived
        self.compute_s: float | None = None  # the worker's last stamp of the sequence's compute
        self.account = request.account
        self.worker_id: str | None = None  # the worker that took it, once one did
        self.worker_started_at: float | None = None  # which process under that id (stream.Started)
        self.started_at: float | None = None  # when its first token arrived: its prompt was read
        self.completion_tokens = 0
        self.resubmissions = 0  # times it went back to the line because its worker died before its first token
        self._ended = False

    @property
    def prompt_tokens(self) -> int:
        return len(self.request.prompt)

    def cancel(self) -> None:
        """The client went away (or the answer ended: then nothing to do). On an event loop the transport's call
        (a Redis round trip) runs on a thread, not awaited: a slow one must not stall every stream on the loop, and
        the caller may be a generator being closed, which cannot await."""
        if self._ended:
            return
        self._ended = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called off any loop: just call it
            self.transport.cancel(self.request.id)
            return
        loop.run_in_executor(None, self.transport.cancel, self.request.id).add_done_callback(self._cancel_done)

    def _cancel_done(self, done: asyncio.Future) -> None:
        if not done.cancelled() and done.exception() is not None:  # its worker drops it with its reader's lease
            log.warning("cancelling sequence %s failed: %s", self.request.id, done.exception())

    async def __aiter__(self) -> AsyncIterator[Delta]:
        """Deltas until the last one (its finish_reason set); a failure raises GenerationFailed (WaitExpired when
        its deadline passed before it joined a batch)."""
        arrived: Inbox[Event] = Inbox()
        pump = asyncio.create_task(self._pump(arrived))  # reads on while this waits with timeouts
        try:
            while True:
                event = await self._next(arrived)
                if isinstance(event, Started):
                    self.worker_id, self.worker_started_at = event.worker_id, event.worker_started_at
                    self.taken_at = time.time()
                    continue
                try:
                    raise_failure(event)
                except GenerationFailed:
                    self._ended = True
                    raise
                if self.started_at is None:
                    self.started_at = time.time()
                self.completion_tokens += 1
                if event.compute_s is not None:
                    self.compute_s = event.compute_s
                if event.finish_reason is not None:
                    self._ended = True
                yield event
                if self._ended:
                    return
        finally:
            pump.cancel()

    async def _pump(self, arrived: Inbox[Event]) -> None:
        try:
            async for event in self.transport.events(self.request.id):
                arrived.put(event)
        except Exception as e:  # the transport failed (Redis went away): the reader must not hang
            arrived.put(Failed(f"reading the sequence's events failed: {type(e).__name__}: {e}"))

    async def _next(self, arrived: Inbox[Event]) -> Event:
        while True:
            if await arrived.wait(self._patience()):
                return arrived.items.popleft()
            if self.worker_id is None:
                self._ended = True
                await asyncio.to_thread(self.transport.cancel, self.request.id)
                raise WaitExpired(expired_message(self.request.waited_s())) from None
            if await asyncio.to_thread(self.worker_alive, self.worker_id, self.worker_started_at):
                continue
            await self._worker_died()

    def _patience(self) -> float | None:
        """How long to wait for the next event before acting: the waiting deadline's rest before a worker took
        the sequence (None: no deadline), then `watch_s` between liveness checks of the worker."""
        if self.worker_id is not None:
            return self.watch_s if self.worker_alive is not None else None
        if self.request.timeout_s is None:
            return None
        return max(0.0, self.request.timeout_s - self.request.waited_s())

    async def _worker_died(self) -> None:
        """Its worker is gone: back to the line if it had sent nothing, else the stream fails saying why (and the
        tokens it delivered are billed on the dead worker's behalf)."""
        dead = self.worker_id
        if self.completion_tokens:
            self._ended = True
            reason = f"worker {dead} died while generating this sequence, after {self.completion_tokens} tokens"
            # No longer in flight: the autoscaler's load drops.
            await asyncio.to_thread(self.transport.abandon, self.request, reason)
            if self.bill is not None:
                seen = CutShort(self.request, dead, self.taken_at or time.time(), time.time(),
                                self.completion_tokens, self.compute_s)  # fmt: skip
                try:
                    await asyncio.to_thread(self.bill, cut_short_record(seen))
                except Exception:  # the client still learns why its stream ended; the log keeps what was lost
                    log.exception("billing sequence %s, cut short by its worker's death, failed", self.request.id)
            raise GenerationFailed(reason)
        # Already admitted once: it waits as long as it takes now, and its old deadline is not held against it;
        # any worker may take it (its preferred one may be the dead one).
        self.request = dataclasses.replace(self.request, timeout_s=None, preferred_worker=None)
        self.worker_id = None
        self.resubmissions += 1
        try:
            await asyncio.to_thread(self.transport.submit, self.request, self.max_waiting)
        except EngineBusy:
            self._ended = True
            raise GenerationFailed(f"worker {dead} died before this sequence started, and no other has room") from None
