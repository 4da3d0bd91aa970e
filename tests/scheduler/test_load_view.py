"""The cached view of a deployment's load reports that routing reads (scheduler/sequences/load_view.py): a burst of
lookups costs one read, concurrent misses too; a copy is read again past its max age or once a newer report was
published, which each transport announces (in process; on Redis through pub/sub, from another client, as a worker
process reports)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import redis

from luminal.scheduler.sequences.load_view import LoadView
from luminal.scheduler.sequences.memory import MemorySequences
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.request import WorkerLoad
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)

DEPLOYMENT = 5


class Reports:
    """A transport's reports, counting the reads of them."""

    def __init__(self):
        self.loads: dict[int, dict[str, WorkerLoad]] = {DEPLOYMENT: {"w1": WorkerLoad(1, 0, 10)}}
        self.reads = 0
        self.gate = threading.Event()
        self.gate.set()

    def read(self, deployment_id: int) -> dict[str, WorkerLoad]:
        self.gate.wait(10)
        self.reads += 1
        return dict(self.loads.get(deployment_id, {}))


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_of_lookups_reads_once_until_the_copy_ages():
    reports, clock = Reports(), Clock()
    view = LoadView(reports.read, max_age_s=0.5, clock=clock)
    first = view.loads(DEPLOYMENT)
    assert first == reports.loads[DEPLOYMENT]
    assert all(view.loads(DEPLOYMENT) is first for _ in range(100))
    assert reports.reads == 1 and view.reads == 1
    reports.loads[DEPLOYMENT]["w2"] = WorkerLoad(0, 0, 12)
    clock.now += 0.49
    assert "w2" not in view.loads(DEPLOYMENT)  # young enough, and no report was announced
    clock.now += 0.02
    assert "w2" in view.loads(DEPLOYMENT) and reports.reads == 2
    assert view.loads(DEPLOYMENT + 1) == {} and reports.reads == 3  # each deployment has its own copy


def test_a_published_report_makes_the_next_lookup_read_again():
    reports, clock = Reports(), Clock()
    view = LoadView(reports.read, max_age_s=3600, clock=clock)
    view.loads(DEPLOYMENT)
    reports.loads[DEPLOYMENT]["w1"] = WorkerLoad(4, 2, 3)
    view.published(DEPLOYMENT + 1)  # another deployment's report
    assert view.loads(DEPLOYMENT)["w1"].running == 1 and reports.reads == 1
    view.published(DEPLOYMENT)
    assert view.loads(DEPLOYMENT)["w1"].running == 4 and reports.reads == 2


def test_a_report_published_during_a_read_is_not_lost():
    reports, clock = Reports(), Clock()
    view = LoadView(reports.read, max_age_s=3600, clock=clock)
    reports.gate.clear()
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(view.loads, DEPLOYMENT)
        while not view._reading[DEPLOYMENT].locked():
            time.sleep(0.001)
        view.published(DEPLOYMENT)  # after the read began: what it returns may predate this report
        reports.gate.set()
        reading.result(10)
    view.loads(DEPLOYMENT)
    assert reports.reads == 2


def test_concurrent_misses_wait_for_one_read():
    reports, clock = Reports(), Clock()
    view = LoadView(reports.read, max_age_s=3600, clock=clock)
    reports.gate.clear()
    with ThreadPoolExecutor(8) as pool:
        lookups = [pool.submit(view.loads, DEPLOYMENT) for _ in range(8)]
        while not view._reading[DEPLOYMENT].locked():
            time.sleep(0.001)
        reports.gate.set()
        assert all("w1" in lookup.result(10) for lookup in lookups)
    assert reports.reads == 1


def test_the_memory_transports_view_sees_each_report_at_once():
    transport = MemorySequences()
    assert transport.recent_loads(DEPLOYMENT) == {}
    transport.report(DEPLOYMENT, "w1", WorkerLoad(1, 0, 8))
    assert list(transport.recent_loads(DEPLOYMENT)) == ["w1"]
    transport.report(DEPLOYMENT, "w1", None)
    assert transport.recent_loads(DEPLOYMENT) == {}


def test_on_redis_a_workers_report_reaches_a_gateways_view_through_its_announcement(redis_namespace):  # noqa: F811
    # The copies never age here: only the announcement can make the gateway read the reports again.
    gateway = RedisSequences(REDIS_URL, redis_namespace, view_max_age_s=3600)
    worker = RedisSequences(REDIS_URL, redis_namespace)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert gateway.recent_loads(DEPLOYMENT) == {}
        channel = f"{redis_namespace}:seq:reports"
        wait_until(lambda: dict(client.pubsub_numsub(channel)).get(channel.encode(), 0) > 0, "the gateway listens")
        reads = gateway._view.reads
        worker.report(DEPLOYMENT, "w1", WorkerLoad(2, 1, 30))
        wait_until(lambda: "w1" in gateway.recent_loads(DEPLOYMENT), "the gateway's view holds w1's report")
        assert gateway.recent_loads(DEPLOYMENT)["w1"].running == 2
        assert [gateway.recent_loads(DEPLOYMENT) for _ in range(50)] and gateway._view.reads <= reads + 2
        worker.report(DEPLOYMENT, "w1", None)  # stopping: withdrawn, and announced too
        wait_until(lambda: gateway.recent_loads(DEPLOYMENT) == {}, "the gateway's view drops w1")
    finally:
        client.close()
        worker.close()
        gateway.close()


def wait_until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)
