"""The waiting line of one generation engine: sequences that asked for a place in the batch, in the order they get
one, by priority level (1 most urgent .. 10, as inference requests are queued: scheduler/work.py) and then by
arrival.

Its rules are the inference queue's: it is bounded (past `max_waiting` a newcomer is refused with `EngineBusy`, a
429), and each sequence may have a deadline for its start (joining the batch): `sweep` ends those whose deadline
passed with `Expired` (they never run, so nothing is billed) and drops the cancelled ones. The engine takes from
the front only: when the first in line cannot get its cache blocks it waits and so does everyone behind it, so a
big request is never starved by smaller ones of its level.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from luminal.scheduler.generation.stream import Delta, Expired, Failed, expired_message
from luminal.scheduler.work import DEFAULT_PRIORITY, effective_priority

MAX_WAITING = 256  # the line's bound unless the deployment sets its own


class EngineBusy(RuntimeError):
    """Too many sequences are already waiting for a place in the batch (a 429)."""


class Waiter(Protocol):
    """What waits in a line: an engine's TokenStream, or a sequence waiting in a transport for a worker."""

    @property
    def cancelled(self) -> bool: ...

    def put(self, event: Delta | Failed) -> None: ...


@dataclass(order=True)
class _Place:
    level: int
    arrival: int  # breaks ties within a level: first come, first served
    stream: Waiter = field(compare=False)
    arrived: float = field(compare=False)  # the line's clock, when its request arrived
    deadline: float | None = field(compare=False)  # the line's clock; None: it may wait as long as it takes


class WaitingLine:
    def __init__(self, max_waiting: int, clock: Callable[[], float] = time.monotonic):
        if max_waiting < 0:
            raise ValueError(f"max_waiting must be 0 or more, not {max_waiting}")
        self.max_waiting = max_waiting  # bounded: past it a new request is refused, never queued without end
        self.clock = clock  # monotonic seconds; tests give their own
        self._places: list[_Place] = []  # sorted: the front of the line is [0]
        self._arrivals = itertools.count()

    def add(
        self,
        stream: Waiter,
        priority: int | None = DEFAULT_PRIORITY,
        timeout_s: float | None = None,
        waited_s: float = 0.0,
    ) -> None:
        """Join the line at `priority` (1 most urgent .. 10; 0 or None: the default level), to start within
        `timeout_s` seconds of the request's arrival, `waited_s` seconds ago (None: no deadline; one already past
        expires at the next sweep). Raises EngineBusy when the line is full."""
        level = effective_priority(priority)
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError(f"a waiting timeout must be a positive number of seconds, not {timeout_s}")
        if not waited_s >= 0:
            raise ValueError(f"the time a request already waited must be 0 or more seconds, not {waited_s}")
        if len(self._places) >= self.max_waiting:
            raise EngineBusy(f"{len(self._places)} sequences are already waiting for this model; retry later")
        # Counted from the request's arrival, as an inference request's deadline is: the time spent before the
        # engine saw it (authentication, loading the model, tokenizing) is time the client waited too.
        arrived = self.clock() - waited_s
        deadline = None if timeout_s is None else arrived + timeout_s
        bisect.insort(self._places, _Place(level, next(self._arrivals), stream, arrived, deadline))

    def sweep(self) -> None:
        """End the sequences whose deadline passed (each gets `Expired`) and drop the cancelled ones."""
        if not self._places:
            return
        now = self.clock()
        kept = []
        for place in self._places:
            if place.stream.cancelled:
                continue
            if place.deadline is not None and now >= place.deadline:
                waited = now - place.arrived
                place.stream.put(Expired(expired_message(waited)))
                continue
            kept.append(place)
        self._places = kept

    def until_deadline(self) -> float | None:
        """Seconds (of the line's clock) until the earliest deadline of a waiting sequence, 0 when one has passed;
        None when none has a deadline."""
        deadlines = [p.deadline for p in self._places if p.deadline is not None]
        return max(0.0, min(deadlines) - self.clock()) if deadlines else None

    def first(self) -> Waiter:
        """The sequence at the front of the line (IndexError when none waits)."""
        return self._places[0].stream

    def pop_first(self) -> Waiter:
        return self._places.pop(0).stream

    def pop_each(self, accept: Callable[[Waiter], bool], limit: int) -> list[Waiter]:
        """Up to `limit` sequences that `accept` takes, in line order, out of the line (the others keep their
        places)."""
        taken, kept = [], []
        for place in self._places:
            if len(taken) < limit and accept(place.stream):
                taken.append(place.stream)
            else:
                kept.append(place)
        self._places = kept
        return taken

    def drain(self) -> list[Waiter]:
        """Every waiting sequence, in order, leaving the line empty."""
        streams, self._places = [p.stream for p in self._places], []
        return streams

    def __len__(self) -> int:
        return len(self._places)

    def __iter__(self) -> Iterator[Waiter]:
        return iter([p.stream for p in self._places])  # a copy: the engine thread may change the line meanwhile
