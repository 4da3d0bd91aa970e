"""The gateway's reader of sequence events on Redis (scheduler/sequences/event_reader.py): the sequences an event
loop relays are read with one blocking XREAD among them, not one each; a sequence that starts while that call
blocks is read at once, not when the call times out; a failed call fails every reader."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account, Delta, Started
from luminal.scheduler.queues import resp_async
from luminal.scheduler.sequences import event_reader
from luminal.scheduler.sequences.event_reader import EventReader
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.request import SequenceRequest
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)

DEPLOYMENT = 12
pytestmark = pytest.mark.skipif(not resp_async.supports(REDIS_URL), reason="the lean client needs hiredis")


@pytest.fixture
def transport(redis_namespace):  # noqa: F811 (the fixture above)
    transport = RedisSequences(REDIS_URL, redis_namespace)
    yield transport
    transport.close()


@pytest.fixture
def xreads(monkeypatch) -> list[int]:
    """The streams named by each XREAD the gateway's lean clients send (the wake stream included)."""
    calls: list[int] = []
    blocking = resp_async.RespClient.call_blocking

    async def counted(self, *args):
        if args[0] == "XREAD":
            calls.append((len(args) - args.index("STREAMS") - 1) // 2)
        return await blocking(self, *args)

    monkeypatch.setattr(resp_async.RespClient, "call_blocking", counted)
    return calls


def submitted(transport: RedisSequences, count: int) -> list[SequenceRequest]:
    requests = []
    for _ in range(count):
        account = Account(uuid.uuid4().hex, DEPLOYMENT, 3, "cpu", "tiny", 2)
        requests.append(SequenceRequest(account, (5, 6, 7), SamplingParams(max_tokens=3)))
        transport.submit(requests[-1], max_waiting=64)
    return requests


def steps(requests: list[SequenceRequest], count: int = 3) -> list[list]:
    """`count` decode steps' events of every sequence, the last ending them."""
    last = count - 1
    return [[(r.id, Delta(str(k), k, "length" if k == last else None)) for r in requests] for k in range(count)]


async def read(transport: RedisSequences, request_id: str) -> list:
    return [event async for event in transport.events(request_id)]


def test_many_sequences_are_read_with_one_call_among_them(transport, xreads):
    requests = submitted(transport, 8)
    assert len(transport.take(DEPLOYMENT, "w1", 8, 1.0, worker_started_at=1765080000.5)) == 8
    for step in steps(requests):
        transport.emit(step)

    async def read_every() -> list[list]:
        return await asyncio.wait_for(asyncio.gather(*(read(transport, r.id) for r in requests)), 10)

    for events in asyncio.run(read_every()):
        assert events[0] == Started("w1", 1765080000.5)  # the taker, and which process under its id
        assert [e.text for e in events[1:]] == ["0", "1", "2"]
    assert max(xreads) == 9  # the wake stream and all 8 sequences' streams in one call
    assert len(xreads) < 8  # one call per sequence would be at least 8


def test_a_sequence_started_while_the_call_blocks_is_read_at_once(transport, monkeypatch):
    monkeypatch.setattr(event_reader, "BLOCK_MS", 5000)  # a call that times out is far slower than a wake
    quiet, late = submitted(transport, 2)
    transport.take(DEPLOYMENT, "w1", 2, 1.0)

    async def scenario() -> float:
        blocked = asyncio.create_task(read(transport, quiet.id))  # its call blocks: nothing comes for it
        await asyncio.sleep(0.2)
        began = time.monotonic()
        transport.emit([(late.id, Delta("x", 4, "length"))])
        events = await asyncio.wait_for(read(transport, late.id), 10)
        took = time.monotonic() - began
        assert [e.text for e in events[1:]] == ["x"]
        transport.emit([(quiet.id, Delta("y", 5, "length"))])
        assert [e.text for e in (await asyncio.wait_for(blocked, 10))[1:]] == ["y"]
        return took

    assert asyncio.run(scenario()) < 2.0


def test_a_failed_call_fails_every_reader():
    async def blocking(*args):
        await asyncio.sleep(0.05)
        raise redis.ConnectionError("Redis went away")

    async def call(*args):
        return b"0-1"

    async def scenario() -> list:
        reader = EventReader(blocking, call, "wake", 1000)

        async def one(key: str):
            async for _ in reader.entries(key):
                pass

        return await asyncio.wait_for(asyncio.gather(one("a"), one("b"), return_exceptions=True), 5)

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, redis.ConnectionError) for o in outcomes), outcomes
