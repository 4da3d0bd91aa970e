"""The waiting line of a generation engine, on a stepped clock: most urgent level first and first come first
served within a level; bounded (EngineBusy); a sequence past its deadline is ended with an expiry and leaves the
line, a cancelled one is dropped, and the line's length (the waiting gauge) counts neither."""

import asyncio

import pytest

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.sequence import Sequence
from luminal.scheduler.generation.stream import GenerationFailed, TokenStream, WaitExpired
from luminal.scheduler.generation.waiting import EngineBusy, WaitingLine


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _stream(loop, tokens: int = 3) -> TokenStream:
    return TokenStream(Sequence([1] * tokens, SamplingParams(max_tokens=4), lambda ids: ""), loop)


def _failure(loop, stream: TokenStream) -> GenerationFailed:
    """The failure the stream's reader gets (after the engine thread's events arrive)."""

    async def read():
        async for _ in stream:
            raise AssertionError("a waiting sequence got a token")

    with pytest.raises(GenerationFailed) as caught:
        loop.run_until_complete(asyncio.wait_for(read(), 5))
    return caught.value


def test_most_urgent_level_first_then_arrival(loop):
    line = WaitingLine(10)
    low, default, urgent, default2, urgent2, unset = (_stream(loop) for _ in range(6))
    for stream, priority in [(low, 10), (default, 5), (urgent, 1), (default2, 0), (urgent2, 1), (unset, None)]:
        line.add(stream, priority)
    assert list(line) == [urgent, urgent2, default, default2, unset, low]
    assert line.pop_first() is urgent and line.first() is urgent2 and len(line) == 5


def test_full_line_refuses_and_bad_values_are_named(loop):
    line = WaitingLine(2)
    line.add(_stream(loop))
    line.add(_stream(loop))
    with pytest.raises(EngineBusy, match="2 sequences are already waiting"):
        line.add(_stream(loop), priority=1)  # urgency does not pass the bound
    assert len(line) == 2
    with pytest.raises(ValueError, match="priority 11 is out of range"):
        WaitingLine(2).add(_stream(loop), 11)
    with pytest.raises(ValueError, match="positive number of seconds"):
        WaitingLine(2).add(_stream(loop), 5, timeout_s=0)


def test_sweep_ends_the_expired_and_drops_the_cancelled(loop):
    clock = Clock()
    line = WaitingLine(10, clock)
    soon, later, never, cancelled = (_stream(loop) for _ in range(4))
    line.add(soon, 1, timeout_s=5)
    line.add(later, 5, timeout_s=10)
    line.add(never, 5)
    line.add(cancelled, 5)
    clock.now += 4.999
    line.sweep()
    assert list(line) == [soon, later, never, cancelled]
    cancelled.cancel()
    clock.now += 0.001  # soon's deadline, exactly
    line.sweep()
    assert list(line) == [later, never] and len(line) == 2
    error = _failure(loop, soon)
    assert isinstance(error, WaitExpired) and "timeout passed before generation started" in str(error)
    assert "waited 5.000 s" in str(error)
    clock.now += 1000
    line.sweep()
    assert list(line) == [never]  # no deadline: it waits as long as it takes
    assert isinstance(_failure(loop, later), WaitExpired)
    assert not isinstance(_failure(loop, cancelled), WaitExpired)  # cancelled: its own failure, not an expiry


def test_drain_empties_the_line_in_order(loop):
    line = WaitingLine(3)
    a, b = _stream(loop), _stream(loop)
    line.add(a, 7)
    line.add(b, 2)
    assert line.drain() == [b, a] and len(line) == 0 and not line


def test_a_deadline_counts_from_the_requests_arrival(loop):
    """A request that waited before it reached the line (`waited_s`) has that much less of its timeout left; one
    whose timeout already passed expires at the next sweep."""
    clock = Clock()
    line = WaitingLine(10, clock)
    late, overdue, fresh = (_stream(loop) for _ in range(3))
    line.add(late, timeout_s=5, waited_s=3)
    line.add(overdue, timeout_s=1, waited_s=2)
    line.add(fresh, timeout_s=5)
    line.sweep()
    assert list(line) == [late, fresh]
    clock.now += 2
    line.sweep()
    assert list(line) == [fresh]
    assert "it waited 5.000 s" in str(_failure(loop, late))
    assert "it waited 2.000 s" in str(_failure(loop, overdue))
    with pytest.raises(ValueError, match="0 or more seconds"):
        line.add(_stream(loop), timeout_s=5, waited_s=-1)
