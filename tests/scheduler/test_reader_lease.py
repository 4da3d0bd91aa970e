"""A gateway's reader lease on Redis (scheduler/sequences/reader_lease.py): held and renewed while the gateway lives,
given up when it closes; a worker drops the sequences of a gateway whose lease lapsed, and only those."""

from __future__ import annotations

import time
import uuid

import pytest

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.request import SequenceRequest
from tests.scheduler.queue_fixtures import REDIS_URL

DEPLOYMENT = 12


def sequence() -> SequenceRequest:
    return SequenceRequest(Account(uuid.uuid4().hex, DEPLOYMENT, 3, "cpu"), (5, 6), SamplingParams(max_tokens=4))


@pytest.fixture
def redis_client():
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


def test_a_worker_drops_the_sequences_of_a_gateway_whose_lease_lapsed_and_only_those(redis_namespace, redis_client):
    gone, live = RedisSequences(REDIS_URL, redis_namespace), RedisSequences(REDIS_URL, redis_namespace)
    worker = RedisSequences(REDIS_URL, redis_namespace)
    try:
        orphan, kept = sequence(), sequence()
        gone.submit(orphan, max_waiting=8)
        live.submit(kept, max_waiting=8)
        taken = worker.take(DEPLOYMENT, "w1", 4, 1.0)
        assert {r.reader for r in taken} == {gone.reader_id, live.reader_id}
        assert worker.cancelled([orphan.id, kept.id]) == set()  # both gateways hold their leases
        redis_client.delete(f"{redis_namespace}:seq:reader:{gone.reader_id}")  # as if its gateway was killed
        assert worker.cancelled([orphan.id, kept.id]) == {orphan.id}
    finally:
        for t in (gone, live, worker):
            t.close()


def test_a_gateway_renews_its_lease_while_it_lives_and_gives_it_up_when_it_closes(redis_namespace, redis_client):
    gateway = RedisSequences(REDIS_URL, redis_namespace, reader_lease_s=0.3)
    key = f"{redis_namespace}:seq:reader:{gateway.reader_id}"
    gateway.submit(sequence(), max_waiting=8)
    deadline = time.monotonic() + 1.0  # over three times the lease: it lapses unless renewed
    while time.monotonic() < deadline:
        assert redis_client.exists(key)
        time.sleep(0.05)
    gateway.close()
    assert not redis_client.exists(key)
