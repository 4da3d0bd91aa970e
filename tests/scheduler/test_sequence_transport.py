"""The sequence transport's contract (scheduler/sequences/base.py), which every backend keeps (in memory, and on the
Redis at LUMINAL_TEST_REDIS_URL): admission with the waiting line's bound, priorities and deadlines; a step's events
reaching the sequence's reader in order; cancellation of waiting and running sequences; the load the autoscaler
reads; the gateway-side relay."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid

import pytest

from luminal.scheduler.generation.engine import EngineBusy
from luminal.scheduler.generation.logprobs import TokenLogprob
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import (
    Account,
    Delta,
    Expired,
    Failed,
    GenerationFailed,
    Started,
    WaitExpired,
)
from luminal.scheduler.sequences.memory import MemorySequences
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad
from tests.scheduler.queue_fixtures import REDIS_URL

DEPLOYMENT = 11


@pytest.fixture(params=["memory", "redis"])
def transport(request):
    if request.param == "memory":
        yield MemorySequences()
        return
    transport = RedisSequences(REDIS_URL, request.getfixturevalue("redis_namespace"))
    yield transport
    transport.close()


def sequence(priority: int = 5, timeout_s: float | None = None, waited_s: float = 0.0, **params) -> SequenceRequest:
    account = Account(uuid.uuid4().hex, DEPLOYMENT, 3, "cpu", "tiny", 2)
    sampling = SamplingParams(**{"max_tokens": 4, **params})
    return SequenceRequest(account, (5, 6, 7), sampling, priority, timeout_s, time.time() - waited_s)


def read_all(transport, request_id: str) -> list:
    async def read():
        return [event async for event in transport.events(request_id)]

    return asyncio.run(asyncio.wait_for(read(), 10))


def test_a_taken_sequence_is_the_one_submitted(transport):
    submitted = sequence(temperature=0.5, top_k=3, stop=("x", "yz"), stop_token_ids=(9,), logprobs=2, seed=4)
    transport.submit(submitted, max_waiting=8)
    [taken] = transport.take(DEPLOYMENT, "w1", 4, 1.0)
    assert dataclasses.replace(taken, reader=None) == submitted  # a transport across processes names its reader


def test_most_urgent_first_then_arrival_and_max_items(transport):
    low, default, urgent, default2 = sequence(9), sequence(), sequence(1), sequence()
    for s in (low, default, urgent, default2):
        transport.submit(s, max_waiting=8)
    assert transport.depth(DEPLOYMENT) == 4 and transport.in_flight(DEPLOYMENT) == 0
    assert [s.id for s in transport.take(DEPLOYMENT, "w1", 3, 1.0)] == [urgent.id, default.id, default2.id]
    assert transport.depth(DEPLOYMENT) == 1 and transport.in_flight(DEPLOYMENT) == 3
    assert [s.id for s in transport.take(DEPLOYMENT, "w1", 3, 1.0)] == [low.id]
    assert transport.take(DEPLOYMENT + 1, "w1", 3, 0.0) == []  # another deployment's line is its own


def test_a_full_line_refuses_naming_it(transport):
    transport.submit(sequence(), max_waiting=2)
    transport.submit(sequence(), max_waiting=2)
    with pytest.raises(EngineBusy, match="2 sequences are already waiting for this model"):
        transport.submit(sequence(priority=1), max_waiting=2)  # urgency does not pass the bound
    transport.take(DEPLOYMENT, "w1", 1, 1.0)
    transport.submit(sequence(), max_waiting=2)  # room again once a worker took one


def test_an_expired_sequence_is_never_taken_and_its_reader_is_told(transport):
    late = sequence(timeout_s=2.0, waited_s=5.0)  # its request arrived 5 s ago; it may wait 2 s
    fresh = sequence(timeout_s=60.0)
    transport.submit(late, max_waiting=8)
    transport.submit(fresh, max_waiting=8)
    assert [s.id for s in transport.take(DEPLOYMENT, "w1", 4, 1.0)] == [fresh.id]
    [event] = [e for e in read_all(transport, late.id) if not isinstance(e, Started)]  # Redis: taken, then ended
    assert isinstance(event, Expired) and "it waited 5." in event.message


def test_events_reach_the_reader_in_order_until_the_last(transport):
    s = sequence(logprobs=1)
    transport.submit(s, max_waiting=8)
    transport.take(DEPLOYMENT, "w1", 1, 1.0, worker_started_at=1765080000.123456)
    logprob = TokenLogprob(8, -0.25, ((8, -0.25),))
    events = [Delta("he", 8, None, logprob), Delta("llo", 9, None), Delta("", 2, "stop")]
    transport.emit([(s.id, e) for e in events[:1]])
    transport.emit([(s.id, e) for e in events[1:]] + [(s.id, Delta("never read", 3, None))])
    # The take itself names the worker, and which process under that id (its registration's started_at, exact)
    assert read_all(transport, s.id) == [Started("w1", 1765080000.123456), *events]
    assert transport.in_flight(DEPLOYMENT) == 0  # its last event ended it


def test_a_reader_waits_for_events_emitted_by_another_thread(transport):
    s = sequence()
    transport.submit(s, max_waiting=8)

    def worker():
        [taken] = transport.take(DEPLOYMENT, "w1", 1, 5.0)
        for k in range(3):
            transport.emit([(taken.id, Delta(str(k), k, "length" if k == 2 else None))])

    thread = threading.Thread(target=worker)
    thread.start()
    assert [e.text for e in read_all(transport, s.id) if isinstance(e, Delta)] == ["0", "1", "2"]
    thread.join()


def test_take_waits_for_a_submit(transport):
    s = sequence()
    timer = threading.Timer(0.1, transport.submit, (s, 8))
    timer.start()
    assert [t.id for t in transport.take(DEPLOYMENT, "w1", 1, 10.0)] == [s.id]
    began = time.monotonic()
    assert transport.take(DEPLOYMENT, "w1", 1, 0.05) == []
    assert time.monotonic() - began >= 0.05


def test_cancelling_a_waiting_sequence_drops_it(transport):
    gone, kept = sequence(), sequence()
    transport.submit(gone, max_waiting=8)
    transport.submit(kept, max_waiting=8)
    transport.cancel(gone.id)
    assert transport.depth(DEPLOYMENT) == 1
    assert [s.id for s in transport.take(DEPLOYMENT, "w1", 4, 1.0)] == [kept.id]


def test_cancelling_a_running_sequence_reaches_its_worker(transport):
    running, other = sequence(), sequence()
    transport.submit(running, max_waiting=8)
    transport.submit(other, max_waiting=8)
    transport.take(DEPLOYMENT, "w1", 2, 1.0)
    transport.cancel(running.id)
    transport.cancel(running.id)  # idempotent
    assert transport.cancelled([running.id, other.id]) == {running.id}
    transport.emit([(running.id, Failed("the sequence was cancelled"))])  # the worker dropped it
    assert transport.in_flight(DEPLOYMENT) == 1
    assert transport.cancelled([running.id]) == set()


def test_the_relay_counts_tokens_and_names_the_worker(transport):
    s = sequence()
    transport.submit(s, max_waiting=8)
    transport.take(DEPLOYMENT, "w1", 1, 1.0)
    transport.emit([(s.id, Delta("a", 4, None)), (s.id, Delta("b", 5, "length"))])
    relay = RelayedStream(transport, s)

    async def read():
        return [d.text async for d in relay]

    assert asyncio.run(read()) == ["a", "b"]
    assert (relay.worker_id, relay.completion_tokens, relay.prompt_tokens) == ("w1", 2, 3)
    assert relay.started_at is not None


def test_the_relay_expires_a_sequence_no_worker_takes_by_its_deadline(transport):
    s = sequence(timeout_s=0.2)
    transport.submit(s, max_waiting=8)
    relay = RelayedStream(transport, s)

    async def read():
        return [d async for d in relay]

    with pytest.raises(WaitExpired, match="timeout passed before generation started"):
        asyncio.run(read())
    assert s.waited_s() >= 0.2
    assert transport.take(DEPLOYMENT, "w1", 1, 0.0) == []  # cancelled: no worker runs it now


def _alive(worker_id: str, worker_started_at: float | None) -> bool:
    return worker_id != "dead"  # the registry's view in these tests: the worker "dead" died


def test_a_sequence_whose_worker_died_before_its_first_token_goes_to_another(transport):
    s = sequence(timeout_s=30)
    transport.submit(s, max_waiting=8)
    transport.take(DEPLOYMENT, "dead", 1, 1.0)  # and it dies before emitting anything
    relay = RelayedStream(transport, s, _alive, max_waiting=8, watch_s=0.05)

    def second_worker():
        [taken] = transport.take(DEPLOYMENT, "w2", 1, 10.0)
        assert taken.id == s.id and taken.timeout_s is None  # admitted once already: no deadline held against it
        transport.emit([(s.id, Delta("a", 1, None)), (s.id, Delta("b", 2, "length"))])

    thread = threading.Thread(target=second_worker)
    thread.start()

    async def read():
        return [d.text async for d in relay]

    assert asyncio.run(asyncio.wait_for(read(), 20)) == ["a", "b"]
    thread.join()
    assert (relay.worker_id, relay.resubmissions) == ("w2", 1)
    assert transport.in_flight(DEPLOYMENT) == 0


def test_a_stream_whose_worker_died_mid_sequence_ends_with_an_error_naming_it(transport):
    s = sequence()
    transport.submit(s, max_waiting=8)
    transport.take(DEPLOYMENT, "dead", 1, 1.0)
    transport.emit([(s.id, Delta("a", 1, None))])
    relay = RelayedStream(transport, s, _alive, watch_s=0.05)
    texts = []

    async def read():
        async for delta in relay:
            texts.append(delta.text)

    began = time.monotonic()
    with pytest.raises(GenerationFailed, match="worker dead died while generating this sequence, after 1 tokens"):
        asyncio.run(asyncio.wait_for(read(), 20))
    assert texts == ["a"] and time.monotonic() - began < 5
    assert transport.depth(DEPLOYMENT) == 0  # not submitted again: its client already has part of an answer
    assert transport.in_flight(DEPLOYMENT) == 0  # abandoned: no longer load for the autoscaler


def test_workers_loads_are_the_last_each_reported_until_it_stops(transport):
    transport.report(DEPLOYMENT, "w1", WorkerLoad(3, 1, 40))
    transport.report(DEPLOYMENT, "w2", WorkerLoad(0, 0, None))
    transport.report(DEPLOYMENT, "w1", WorkerLoad(2, 0, 44, reported_at=5.0))
    assert transport.loads(DEPLOYMENT) == {"w1": WorkerLoad(2, 0, 44, 5.0), "w2": transport.loads(DEPLOYMENT)["w2"]}
    assert transport.loads(DEPLOYMENT)["w2"].kv_blocks_free is None
    transport.report(DEPLOYMENT, "w2", None)
    assert list(transport.loads(DEPLOYMENT)) == ["w1"] and transport.loads(DEPLOYMENT + 1) == {}


def test_a_steps_events_go_out_with_a_read_of_the_running_sequences_cancels(transport):
    """A worker's step is one call (one round trip on Redis): its events out, the cancels of the sequences it still
    runs back, which it acts on before its next step."""
    ending, dropped, running = sequence(), sequence(), sequence()
    for s in (ending, dropped, running):
        transport.submit(s, max_waiting=8)
    transport.take(DEPLOYMENT, "w1", 3, 1.0)
    transport.cancel(dropped.id)
    last = Delta("a", 4, "length")
    assert transport.emit([(ending.id, last), (running.id, Delta("b", 5, None))], watch=[dropped.id, running.id]) == {
        dropped.id
    }
    assert read_all(transport, ending.id)[1:] == [last]  # after Started: the events went out
    assert transport.emit([], watch=[running.id]) == set()  # a step without events still reads them
    assert transport.emit([(running.id, Delta("c", 6, "length"))]) == set()  # nothing watched: nothing read
    assert transport.in_flight(DEPLOYMENT) == 1  # the dropped one, until its worker ends it
