"""The sequence transport's Redis keys outlive nobody (scheduler/sequences/redis_sequences.py): a deployment's
waiting set, arrivals counter and taken set expire after their last use, and a dead worker's taken sequences stop
counting in the deployment's in-flight load (taken_owners.py)."""

from __future__ import annotations

import time
import uuid

import pytest

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account, Delta
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad
from luminal.scheduler.sequences.taken_owners import STALE_REPORT_S, dead_holdings
from tests.scheduler.queue_fixtures import REDIS_URL

DEPLOYMENT = 13
TTL_S = 30.0


def sequence() -> SequenceRequest:
    return SequenceRequest(Account(uuid.uuid4().hex, DEPLOYMENT, 3, "cpu"), (5, 6), SamplingParams(max_tokens=4))


@pytest.fixture
def keys(redis_namespace):
    import redis

    transport, client = RedisSequences(REDIS_URL, redis_namespace, ttl_s=TTL_S), redis.Redis.from_url(REDIS_URL)
    yield transport, client, lambda name: f"{redis_namespace}:seq:{name}:{DEPLOYMENT}"
    transport.close()
    client.close()


def test_a_deployments_keys_expire_after_their_last_use(keys):
    transport, client, key = keys
    transport.submit(sequence(), max_waiting=8)
    transport.submit(sequence(), max_waiting=8)
    for name in ("waiting", "arrivals"):
        assert 0 < client.pttl(key(name)) <= TTL_S * 1000, name
    transport.take(DEPLOYMENT, "w1", 1, 1.0)
    for name in ("taken", "owners"):
        assert 0 < client.pttl(key(name)) <= TTL_S * 1000, name


def test_a_dead_workers_sequences_stop_counting_in_flight(keys):
    transport, client, key = keys
    live, dead, ended = sequence(), sequence(), sequence()
    for s in (live, dead, ended):
        transport.submit(s, max_waiting=8)
    transport.take(DEPLOYMENT, "live", 1, 1.0)
    transport.take(DEPLOYMENT, "dead", 1, 1.0)
    transport.take(DEPLOYMENT, "live", 1, 1.0)
    transport.emit([(ended.id, Delta("a", 1, "length"))])
    transport.report(DEPLOYMENT, "live", WorkerLoad(1, 0, 10))
    transport.report(DEPLOYMENT, "dead", WorkerLoad(1, 0, 10, reported_at=time.time() - STALE_REPORT_S - 1))
    assert transport.in_flight(DEPLOYMENT) == 1  # the dead worker's sequence no longer counts
    assert client.hkeys(key("owners")) == [live.id.encode()]  # and an ended one's holder is forgotten


def test_holders_whose_last_report_is_stale_are_dead():
    now = 1000.0
    loads = {"fresh": WorkerLoad(1, 0, 5, reported_at=now - 1), "stale": WorkerLoad(1, 0, 5, reported_at=now - 60)}
    owners = {b"a": b"fresh", b"b": b"stale", b"c": b"unreported"}
    assert dead_holdings(owners, loads, now) == [b"b"]  # one never reported is not judged
