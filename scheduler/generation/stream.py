"""What one request sees of its sequence: text deltas as the engine makes them final, then the end (finish
reason and token counts) or an error. The engine thread puts events; the request's event loop reads them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from luminal.scheduler.generation.logprobs import TokenLogprob
from luminal.scheduler.generation.sequence import Sequence


@dataclass(frozen=True)
class Delta:
    text: str
    token: int
    finish_reason: str | None  # set on the sequence's last delta
    logprob: TokenLogprob | None = None  # when the request asked for logprobs


@dataclass(frozen=True)
class Failed:
    message: str


@dataclass(frozen=True)
class Expired(Failed):
    """The sequence's deadline for joining the batch passed while it waited: it never ran."""


@dataclass(frozen=True)
class Account:
    """Whom a sequence is billed to: what its usage record names besides its times and tokens."""

    request_id: str
    deployment_id: int
    tenant_id: int
    gpu_type: str
    model_name: str | None = None
    model_version: int | None = None


class TokenStream:
    def __init__(self, sequence: Sequence, loop: asyncio.AbstractEventLoop, account: Account | None = None):
        self.sequence = sequence
        self.account = account
        # Set by the engine: the wall-clock time its prefill started, and its share of the compute since
        # (its prefill, and each decode step's time divided among the rows stepped).
        self.started_at: float | None = None
        self.compute_s = 0.0
        self._loop = loop
        self._events: asyncio.Queue[Delta | Failed] = asyncio.Queue()
        self._cancelled = threading.Event()
        self.on_cancel: Callable[[], None] | None = None  # the engine's wake-up: a cancel may let others join

    @property
    def prompt_tokens(self) -> int:
        return len(self.sequence.prompt)

    @property
    def completion_tokens(self) -> int:
        return len(self.sequence.tokens)

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """The client went away: the engine drops the sequence (and its cache rows) before its next step, and
        a reader still waiting is woken with a failure. Called on the event loop's thread."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._events.put_nowait(Failed("the sequence was cancelled"))
            if self.on_cancel is not None:
                self.on_cancel()

    def put(self, event: Delta | Failed) -> None:
        """Called from the engine thread."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)

    async def __aiter__(self) -> AsyncIterator[Delta]:
        """Deltas until the last one (its finish_reason set); a failure raises GenerationFailed (WaitExpired when
        its deadline passed before it joined the batch)."""
        while True:
            event = await self._events.get()
            if isinstance(event, Expired):
                raise WaitExpired(event.message)
            if isinstance(event, Failed):
                raise GenerationFailed(event.message)
            yield event
            if event.finish_reason is not None:
                return


class GenerationFailed(RuntimeError):
    """The engine could not run the model for this sequence (not the caller's fault)."""


class WaitExpired(GenerationFailed):
    """The sequence's deadline for joining the batch passed while it waited (a 504, as an expired inference
    request): it was never run."""
