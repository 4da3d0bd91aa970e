"""The clock that batching, the worker registry and the provisioner read, injected so tests step time instead of
sleeping and asserting wall-clock windows (a loaded machine stretches real waits, never a stepped clock).

`SYSTEM_CLOCK` is the real one and every default. `ManualClock` stands still until a test advances it; its
waits pass their whole timeout at once, since in a test the thread that waits is the one that steps.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: for delays, deadlines and cooldowns within one process."""
        ...

    def time(self) -> float:
        """Wall-clock seconds since the epoch: for times other machines compare (heartbeats, ready times)."""
        ...

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        """Wait until `event` is set or `timeout_s` has passed; whether it is set."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        return event.wait(timeout_s)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """Time that moves only by `advance` (and by waits, which pass their timeout at once). Both readings move
    together; the wall clock starts at `wall_start`, a plausible epoch time, so records stay realistic."""

    def __init__(self, start: float = 1000.0, wall_start: float = 1_800_000_000.0):
        self._lock = threading.Lock()
        self._monotonic = start
        self._wall_offset = wall_start - start

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def time(self) -> float:
        with self._lock:
            return self._monotonic + self._wall_offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock never goes back; asked to advance by {seconds}")
        with self._lock:
            self._monotonic += seconds

    def wait(self, event: threading.Event, timeout_s: float) -> bool:
        if not event.is_set():
            self.advance(max(timeout_s, 0.0))
        return event.is_set()
