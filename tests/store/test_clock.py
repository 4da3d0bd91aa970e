"""The injected clock: the system one reads real time; the manual one moves only when stepped, both readings
together, and its waits pass their timeout at once unless the event is already set."""

from __future__ import annotations

import threading
import time

import pytest

from luminal.store.clock import SYSTEM_CLOCK, ManualClock


def test_the_manual_clock_moves_only_when_stepped():
    clock = ManualClock(start=5.0, wall_start=1_700_000_000.0)
    assert (clock.monotonic(), clock.time()) == (5.0, 1_700_000_000.0)
    clock.advance(2.5)
    assert (clock.monotonic(), clock.time()) == (7.5, 1_700_000_002.5)
    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1)


def test_a_manual_wait_passes_its_timeout_unless_the_event_is_set():
    clock, event = ManualClock(start=0.0), threading.Event()
    assert clock.wait(event, 0.25) is False and clock.monotonic() == 0.25
    event.set()
    assert clock.wait(event, 10) is True and clock.monotonic() == 0.25


def test_the_system_clock_reads_real_time():
    assert abs(SYSTEM_CLOCK.time() - time.time()) < 60
    assert SYSTEM_CLOCK.monotonic() <= time.monotonic()
    event = threading.Event()
    event.set()
    assert SYSTEM_CLOCK.wait(event, 10) is True  # set: returns at once
