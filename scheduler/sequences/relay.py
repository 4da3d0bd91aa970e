"""The gateway's side of one sequence: it reads the sequence's events from the transport and keeps what the
answer needs (tokens counted, whether its prompt was read, the worker that took it), and it bounds the wait for a
worker: a sequence no worker took within its waiting deadline (none running, all busy) is cancelled and ends as
expired, as one that waited past it in an engine's line does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from luminal.scheduler.generation.stream import Delta, Started, WaitExpired, expired_message, raise_failure
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.request import SequenceRequest


class RelayedStream:
    def __init__(self, transport: SequenceTransport, request: SequenceRequest):
        self.transport, self.request = transport, request
        self.account = request.account
        self.worker_id: str | None = None  # the worker that took it, once one did
        self.started_at: float | None = None  # when its first token arrived: its prompt was read
        self.completion_tokens = 0
        self._ended = False

    @property
    def prompt_tokens(self) -> int:
        return len(self.request.prompt)

    def cancel(self) -> None:
        """The client went away (or the answer ended: then nothing to do)."""
        if not self._ended:
            self._ended = True
            self.transport.cancel(self.request.id)

    async def __aiter__(self) -> AsyncIterator[Delta]:
        """Deltas until the last one (its finish_reason set); a failure raises GenerationFailed (WaitExpired when
        its deadline passed before it joined a batch)."""
        events = aiter(self.transport.events(self.request.id))
        try:
            while True:
                event = await self._next(events)
                if isinstance(event, Started):
                    self.worker_id = event.worker_id
                    continue
                try:
                    raise_failure(event)
                except Exception:
                    self._ended = True
                    raise
                if self.started_at is None:
                    self.started_at = time.time()
                self.completion_tokens += 1
                if event.finish_reason is not None:
                    self._ended = True
                yield event
                if self._ended:
                    return
        finally:
            await events.aclose()

    async def _next(self, events: AsyncIterator):
        """The next event; before a worker took the sequence, waited for only until its deadline."""
        request = self.request
        if self.worker_id is not None or request.timeout_s is None:
            return await anext(events)
        left = request.timeout_s - request.waited_s()
        try:
            return await asyncio.wait_for(anext(events), max(left, 0.0))
        except TimeoutError:
            self.cancel()
            raise WaitExpired(expired_message(request.waited_s())) from None
