"""The distributed shape on one machine: requests through Redis Streams to worker processes the provisioner
starts. A worker process serves and bills; when it is killed, the provisioner starts another and serving
goes on. Its cold start is measured from the spawn on a stepped clock, so it is exact."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from luminal.provisioner.local_processes import _ProcessHandle
from luminal.scheduler.registry import MemoryRegistry, WorkerInfo
from luminal.store.clock import ManualClock
from luminal.store.settings import Settings
from tests import prerequisites
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload
from tests.provisioner.test_provisioner import SPEC
from tests.scheduler.queue_fixtures import REDIS_URL


@pytest.fixture
def database_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'meta.db'}"  # the queue backend is under test here, not the database


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception as e:  # no Redis: this shape cannot run here
        prerequisites.unavailable("Redis", f"Redis is unreachable at {REDIS_URL}: {e}")
    namespace = f"lmtest{uuid.uuid4().hex[:10]}"
    yield Settings(data_dir=tmp_path / "data", database_url=database_url, bootstrap_key=BOOTSTRAP_KEY,
                   queue_url=REDIS_URL, queue_namespace=namespace, worker_backend="process")  # fmt: skip
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{namespace}*"))
    if keys:
        client.delete(*keys)


BODY = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}


def workers(http, deployment_id: int, count: int, timeout: float = 60) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        status = http.get(f"/v1/deployments/{deployment_id}/workers").json()
        ready = [w for w in status["workers"] if w["ready_at"] is not None]
        if len(ready) == count:
            return ready
        assert time.monotonic() < deadline, f"expected {count} ready worker(s), have {status}"
        time.sleep(0.1)


def test_worker_processes_serve_bill_and_are_replaced_when_they_die(server, model_bytes):
    http = server.client()
    upload(http, "tiny", model_bytes)
    deployment = deploy_and_wait(http, "tiny", min_replicas=1, max_replicas=1)
    (worker,) = workers(http, deployment["id"], 1)
    assert worker["pid"] != os.getpid()
    first = http.post("/v2/models/tiny/infer", json=BODY)
    assert first.status_code == 200, first.text

    os.kill(worker["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # the dead worker is replaced by a new process
        (replacement,) = workers(http, deployment["id"], 1)
        if replacement["pid"] != worker["pid"]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    again = http.post("/v2/models/tiny/infer", json=BODY)
    assert again.status_code == 200 and again.json()["outputs"] == first.json()["outputs"]

    deadline = time.monotonic() + 10
    while sum(r["batch_size"] for r in http.get("/v1/usage/records").json()) < 2:
        assert time.monotonic() < deadline, "the worker processes did not bill their batches"
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while len(cold_starts := http.get(f"/v1/deployments/{deployment['id']}/workers").json()["cold_start_seconds"]) < 2:
        assert time.monotonic() < deadline, "the provisioner did not record both cold starts"
        time.sleep(0.1)
    assert all(s > 0 for s in cold_starts)


class RunningProcess:
    """What the handle needs of a Popen, for a process that never exits."""

    def poll(self) -> None:
        return None


def test_a_cold_start_runs_from_the_spawn_to_the_ready_time_the_process_registers():
    clock = ManualClock()
    registry = MemoryRegistry(clock)
    handle = _ProcessHandle(RunningProcess(), "w1", SPEC, registry, clock)
    clock.advance(1.5)  # the interpreter starts and imports
    registry.register(WorkerInfo("w1", SPEC.deployment_id, pid=1, host="h", started_at=clock.time()))
    assert handle.cold_start_seconds() is None
    clock.advance(1.0)  # it loads its program
    registry.mark_ready("w1")
    assert handle.cold_start_seconds() == 2.5 and handle.alive()
