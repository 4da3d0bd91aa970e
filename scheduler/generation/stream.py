"""What one sequence's events are and where the engine puts them: text deltas as the engine makes them final, then
the end (finish reason and token counts) or an error.

The engine knows a sequence as a `TokenStream` and puts its events into the stream's `EventSink`. The engine does
not care who reads them: a worker's sink forwards them to the sequence transport (scheduler/sequences), which the
gateway relays to the client; a `LoopSink` hands them to an asyncio reader in the same process (tests, benchmarks).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from luminal.scheduler.generation.logprobs import TokenLogprob
from luminal.scheduler.generation.sequence import Sequence


@dataclass(frozen=True)
class Delta:
    text: str
    token: int
    finish_reason: str | None  # set on the sequence's last delta
    logprob: TokenLogprob | None = None  # when the request asked for logprobs
    # The sequence's compute so far (TokenStream.compute_s), stamped by a worker in another process: should it die,
    # the gateway relaying the sequence bills the tokens it delivered for this share (None: not stamped).
    compute_s: float | None = None


@dataclass(frozen=True)
class Failed:
    message: str


@dataclass(frozen=True)
class Expired(Failed):
    """The sequence's deadline for joining the batch passed while it waited: it never ran."""


def expired_message(waited_s: float) -> str:
    """What a sequence that waited past its deadline for a place in a batch is told."""
    return f"the request's timeout passed before generation started (it waited {waited_s:.3f} s)"


@dataclass(frozen=True)
class Started:
    """A worker took the sequence: it is the one that runs it (and whose death ends it)."""

    worker_id: str
    # Which process under `worker_id` took it: the `started_at` of its registration (WorkerInfo), exactly as it
    # registered it. A worker restarted under its old name registers another; only equality is asked of it, never an
    # order against the reader's clock, which may differ from the worker's. None: sent by a worker from before this
    # field, whose death under its old name goes unseen until its heartbeat does.
    worker_started_at: float | None = None


Event = Delta | Failed | Started


class EventSink(Protocol):
    def put(self, event: Delta | Failed) -> None:
        """Called on the engine's thread; must not block on the reader."""
        ...


@dataclass(frozen=True)
class Account:
    """Whom a sequence is billed to: what its usage record names besides its times and tokens."""

    request_id: str
    deployment_id: int
    tenant_id: int
    gpu_type: str
    model_name: str | None = None
    model_version: int | None = None


class LoopSink:
    """Events for a reader on an asyncio loop of this process: put from any thread, read with `async for`."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._events: asyncio.Queue[Delta | Failed] = asyncio.Queue()

    def put(self, event: Delta | Failed) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)

    async def __aiter__(self) -> AsyncIterator[Delta]:
        """Deltas until the last one (its finish_reason set); a failure raises GenerationFailed (WaitExpired when
        its deadline passed before it joined the batch)."""
        while True:
            event = await self._events.get()
            raise_failure(event)
            yield event
            if event.finish_reason is not None:
                return


class TokenStream:
    """The engine's record of one sequence: its tokens, whom it bills, its compute, whether it was cancelled, and
    the sink its events go to (given an asyncio loop, a `LoopSink` on it, which `async for` reads)."""

    def __init__(self, sequence: Sequence, sink: EventSink | asyncio.AbstractEventLoop, account: Account | None = None):
        self.sequence = sequence
        self.account = account
        # Set by the engine: the wall-clock time its prefill started, and its share of the compute since
        # (its prefill, and each decode step's time divided among the rows stepped).
        self.started_at: float | None = None
        self.compute_s = 0.0
        self.lora_slot = 0  # the LoRA stacks' slot its rows read (0: the base model); set by the engine at submit
        self.sink = LoopSink(sink) if isinstance(sink, asyncio.AbstractEventLoop) else sink
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
        a reader still waiting is woken with a failure."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self.sink.put(Failed("the sequence was cancelled"))
            if self.on_cancel is not None:
                self.on_cancel()

    def put(self, event: Delta | Failed) -> None:
        """Called from the engine thread."""
        self.sink.put(event)

    def __aiter__(self) -> AsyncIterator[Delta]:
        """The deltas of a stream whose sink is a `LoopSink` (see there)."""
        if not isinstance(self.sink, LoopSink):
            raise TypeError(f"this stream's events go to {type(self.sink).__name__}, not to an asyncio reader")
        return self.sink.__aiter__()


def raise_failure(event: Delta | Failed) -> None:
    """Raise what a reader of `event` gets when it is a failure: WaitExpired or GenerationFailed."""
    if isinstance(event, Expired):
        raise WaitExpired(event.message)
    if isinstance(event, Failed):
        raise GenerationFailed(event.message)


class GenerationFailed(RuntimeError):
    """The engine could not run the model for this sequence (not the caller's fault)."""


class WaitExpired(GenerationFailed):
    """The sequence's deadline for joining the batch passed while it waited (a 504, as an expired inference
    request): it was never run."""
