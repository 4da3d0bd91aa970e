"""Billing off the answer path, on SQLite and PostgreSQL with real Redis: a batch's answers and its usage record
are stored in one atomic step, and the drainer moves the records into the ledger exactly once, whether it is
killed between its database commit and its acknowledgement (in a thread and as a SIGKILLed process), restarted,
or replaced by another drainer. A Redis restart with AOF loses no record."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
import subprocess
import time
import uuid
from collections import Counter

import numpy as np
import pytest
import redis
from sqlalchemy import func, select

from luminal.scheduler.ledger import SqlUsageLedger
from luminal.scheduler.queues.memory import MemoryQueue
from luminal.scheduler.queues.redis_streams import RedisStreamsQueue, usage_stream
from luminal.scheduler.usage_drainer import UsageDrainer
from luminal.scheduler.work import OK, InferenceRequest, InferenceResult
from luminal.store.database import Database
from luminal.store.tables import BilledRequest, UsageRecordRow
from tests.scheduler.ledger_world import PRICES, rows, usage
from tests.scheduler.queue_fixtures import REDIS_URL


def answered(queue: RedisStreamsQueue, deployment_id: int, tenant_id: int, count: int, worker: str = "w1"):
    """`count` requests submitted and taken by `worker`: their deliveries, OK results and a usage record."""
    requests = [InferenceRequest(deployment_id, tenant_id, {"x": np.ones((1, 4), np.float32)}) for _ in range(count)]
    for request in requests:
        queue.submit(request, 10_000)
    deliveries = queue.take(deployment_id, worker, count, 1.0)
    assert len(deliveries) == count
    record = usage(
        tenant_id,
        deployment_id,
        worker_id=worker,
        request_ids=tuple(d.request.id for d in deliveries),
        request_rows=(1,) * count,
    )
    return [(d, InferenceResult(d.request.id, OK, {})) for d in deliveries], record


def answered_with_usage(queue, deployment_id: int, tenant_id: int, batches: int, size: int) -> list:
    """`batches` batches of `size` requests answered, each with its usage record as a worker stores them; the
    records."""
    records = []
    for _ in range(batches):
        completions, record = answered(queue, deployment_id, tenant_id, size)
        queue.complete_all(completions, usage=record)
        records.append(record)
    return records


def request_ids(records) -> list[str]:
    return [i for record in records for i in record.request_ids]


def billed_requests(db: Database) -> Counter:
    """How many times each request id appears in the usage rows."""
    with db.session() as s:
        return Counter(i for row in s.scalars(select(UsageRecordRow)) for i in row.request_ids)


def billed_count(db: Database) -> int:
    with db.session() as s:
        return s.scalar(select(func.count()).select_from(BilledRequest))


@pytest.fixture
def queue(redis_namespace):
    made = RedisStreamsQueue(REDIS_URL, redis_namespace)
    yield made
    made.close()


def test_answers_and_their_usage_record_are_stored_together_once(world, queue, redis_namespace):
    db, tenant_id, deployment_id = world
    completions, record = answered(queue, deployment_id, tenant_id, 3)
    queue.complete_all(completions, usage=record)
    results = asyncio.run(asyncio.wait_for(_results(queue, [d.request.id for d, _ in completions]), 10))
    assert [r.status for r in results] == [OK] * 3
    client = redis.Redis.from_url(REDIS_URL)
    [(_, fields)] = client.xrange(usage_stream(redis_namespace))
    assert b"record" in fields
    # A second completion of the same deliveries (a worker presumed dead finishing late) stores no result, so no
    # record either: its requests were billed with the first.
    queue.complete_all(completions, usage=usage(tenant_id, deployment_id, request_ids=record.request_ids))
    assert client.xlen(usage_stream(redis_namespace)) == 1
    client.close()


async def _results(queue, request_ids):
    return [await queue.wait_result(rid, 5) for rid in request_ids]


def test_the_drainer_writes_each_record_to_the_ledger_and_removes_it(world, queue, redis_namespace):
    db, tenant_id, deployment_id = world
    records = answered_with_usage(queue, deployment_id, tenant_id, 4, 2)
    drainer = UsageDrainer(REDIS_URL, redis_namespace, SqlUsageLedger(db, PRICES), "gw-1", gather_s=0)
    assert drainer.backlog() == 4
    assert drainer.flush(timeout=10)  # no thread running: the caller drains
    assert drainer.backlog() == 0
    assert sorted(r.batch_id for r in rows(db)) == sorted(r.batch_id for r in records)
    assert billed_requests(db) == Counter(i for r in records for i in r.request_ids)
    drainer.close()


def test_a_thread_draining_in_the_background_and_a_flush_see_every_answered_batch(world, queue, redis_namespace):
    db, tenant_id, deployment_id = world
    drainer = UsageDrainer(REDIS_URL, redis_namespace, SqlUsageLedger(db, PRICES), "gw-1").start()
    try:
        ids = request_ids(answered_with_usage(queue, deployment_id, tenant_id, 20, 1))
        assert drainer.flush(timeout=30)
        assert billed_requests(db) == Counter(ids)
    finally:
        drainer.close()


class _Killed(BaseException):
    """Stands in for the drainer's death: raised after its transaction committed, before its acknowledgement."""


class _DiesAfterCommit:
    def __init__(self, ledger):
        self.ledger = ledger

    def record(self, record):
        return self.record_many([record])[0]

    def record_many(self, records):
        self.ledger.record_many(records)
        raise _Killed


def test_a_drainer_killed_after_its_commit_bills_nothing_twice_when_others_drain_again(world, queue, redis_namespace):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    ids = request_ids(answered_with_usage(queue, deployment_id, tenant_id, 6, 3))
    dying = UsageDrainer(REDIS_URL, redis_namespace, _DiesAfterCommit(ledger), "gw-dead", gather_s=0, max_records=4)
    with pytest.raises(_Killed):
        dying.drain_once()
    assert dying.backlog() == 6  # written, but still in Redis: pending under the dead drainer
    assert len(billed_requests(db)) == 12
    # Another drainer takes the new records now and the dead one's once they have been idle for claim_idle_s.
    other = UsageDrainer(REDIS_URL, redis_namespace, ledger, "gw-2", claim_idle_s=0.3, gather_s=0)
    assert other.drain_once() == 2
    assert other.backlog() == 4
    time.sleep(0.35)
    assert other.drain_once() == 4
    assert other.backlog() == 0
    assert billed_requests(db) == Counter(ids)  # each request once
    assert billed_count(db) == len(ids)
    dying.close()
    other.close()


def test_a_restarted_drainer_first_drains_what_it_held(world, queue, redis_namespace):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    completions, record = answered(queue, deployment_id, tenant_id, 2)
    queue.complete_all(completions, usage=record)
    with pytest.raises(_Killed):
        UsageDrainer(REDIS_URL, redis_namespace, _DiesAfterCommit(ledger), "gw-1", gather_s=0).drain_once()
    again = UsageDrainer(REDIS_URL, redis_namespace, ledger, "gw-1", gather_s=0)  # the same gateway, restarted
    assert again.drain_once() == 1 and again.backlog() == 0
    assert billed_requests(db) == Counter(record.request_ids)
    again.close()


def _drain_forever(url: str, namespace: str, database_url: str, consumer: str, committed) -> None:
    """A drainer process that reports each commit and then stalls before acknowledging, to be SIGKILLed there."""
    db = Database(database_url)
    ledger = SqlUsageLedger(db, PRICES)

    class Stalls:
        def record(self, record):
            return self.record_many([record])[0]

        def record_many(self, records):
            billed = ledger.record_many(records)
            committed.set()
            time.sleep(60)
            return billed

    drainer = UsageDrainer(url, namespace, Stalls(), consumer, claim_idle_s=0.2, gather_s=0.01, max_records=7)
    while True:
        drainer.drain_once(100)


def test_drainer_processes_sigkilled_mid_drain_lose_nothing_and_bill_nothing_twice(world, queue, redis_namespace):
    db, tenant_id, deployment_id = world
    ids = request_ids(answered_with_usage(queue, deployment_id, tenant_id, 30, 2))
    context = multiprocessing.get_context("spawn")
    for kill in range(3):
        committed = context.Event()
        process = context.Process(
            target=_drain_forever,
            args=(REDIS_URL, redis_namespace, str(db.engine.url.render_as_string(False)), f"gw-{kill}", committed),
        )
        process.start()
        assert committed.wait(120), "the drainer process never committed"
        os.kill(process.pid, signal.SIGKILL)  # between its commit and its acknowledgement
        process.join(30)
    drainer = UsageDrainer(REDIS_URL, redis_namespace, SqlUsageLedger(db, PRICES), "gw-last", claim_idle_s=0.2)
    time.sleep(0.25)
    assert drainer.flush(timeout=30) and drainer.backlog() == 0
    assert billed_requests(db) == Counter(ids)
    assert billed_count(db) == len(ids) == 60
    drainer.close()


def test_a_memory_queue_refuses_a_usage_record_rather_than_drop_it():
    queue = MemoryQueue()
    with pytest.raises(ValueError, match="does not store usage records"):
        queue.complete_all([], usage=usage(1, 1))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_redis(folder, port: int) -> subprocess.Popen:
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", "",
         "--appendonly", "yes", "--appendfsync", "always"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            return server
        except redis.ConnectionError:
            assert time.monotonic() < deadline and server.poll() is None, "redis-server did not start"
            time.sleep(0.05)


@pytest.mark.needs("redis-server")
def test_records_survive_a_redis_crash_with_aof_always(world, tmp_path):
    db, tenant_id, deployment_id = world
    port = _free_port()
    url, namespace = f"redis://127.0.0.1:{port}/0", f"crash-{uuid.uuid4().hex[:8]}"
    server = _start_redis(tmp_path, port)
    try:
        queue = RedisStreamsQueue(url, namespace)
        ids = request_ids(answered_with_usage(queue, deployment_id, tenant_id, 5, 2))
        queue.close()
        server.kill()  # SIGKILL: no shutdown save, only what the AOF holds
        server.wait(10)
        server = _start_redis(tmp_path, port)
        drainer = UsageDrainer(url, namespace, SqlUsageLedger(db, PRICES), "gw-1")
        assert drainer.backlog() == 5
        assert drainer.flush(timeout=30)
        assert billed_requests(db) == Counter(ids)
        drainer.close()
    finally:
        server.kill()
        server.wait(10)
