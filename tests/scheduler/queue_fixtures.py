"""Fixtures for the request queue and worker registry tests: each backend-neutral test runs on the in-memory
backend and on Redis at LUMINAL_TEST_REDIS_URL (default 127.0.0.1:6379/0), in a namespace of its own whose keys
are deleted afterwards. When that Redis is unreachable the Redis cases skip with that reason (under CI they fail)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from luminal.scheduler.work import OK, InferenceRequest, InferenceResult
from tests import prerequisites

REDIS_URL = os.environ.get("LUMINAL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
DEPLOYMENT = 7  # the deployment the queue tests' requests belong to


def request(priority: int = 5, deadline: float | None = None, deployment: int = DEPLOYMENT, value: float = 0.0):
    return InferenceRequest(deployment, tenant_id=1, inputs={"x": np.full((2, 3), value, np.float32)},
                            priority=priority, deadline=deadline)  # fmt: skip


def ok_result(req: InferenceRequest, worker: str = "w1") -> InferenceResult:
    return InferenceResult(req.id, OK, outputs={"y": req.inputs["x"] * 2}, worker_id=worker)


@pytest.fixture
def redis_namespace():
    with fresh_namespace() as namespace:
        yield namespace


@contextlib.contextmanager
def fresh_namespace() -> Iterator[str]:
    """A namespace of its own on the test Redis, its keys deleted afterwards (for fixtures of any scope)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as e:
        prerequisites.unavailable("Redis", f"Redis is unreachable at {REDIS_URL}: {e}")
    namespace = f"lmtest-{uuid.uuid4().hex[:12]}"
    try:
        yield namespace
    finally:
        for key in client.scan_iter(match=f"{namespace}:*", count=500):
            client.delete(key)
        client.close()


@pytest.fixture
def gateway_loop():
    """An event loop in a thread of its own, as the gateway's: queue tests wait for results on it while the
    test's own thread plays the worker."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    loop.close()


@pytest.fixture
def wait(gateway_loop):
    """wait(queue, request_id, timeout): the gateway's wait_result, run on the gateway's loop from this thread."""

    def wait(queue, request_id: str, timeout: float = 2.0) -> InferenceResult:
        return asyncio.run_coroutine_threadsafe(queue.wait_result(request_id, timeout), gateway_loop).result(30)

    return wait


@pytest.fixture(params=["memory", "redis"])
def queue_factory(request, gateway_loop):
    """Makes queues of the parametrised backend (keyword arguments go to its constructor); closes them after."""
    from luminal.scheduler.queues.memory import MemoryQueue
    from luminal.scheduler.queues.redis_streams import RedisStreamsQueue

    namespace = request.getfixturevalue("redis_namespace") if request.param == "redis" else None
    made = []

    def make(**kwargs):
        queue = MemoryQueue(**kwargs) if namespace is None else RedisStreamsQueue(REDIS_URL, namespace, **kwargs)
        made.append(queue)
        return queue

    yield make
    for queue in made:
        queue.close()


@pytest.fixture
def queue(queue_factory):
    return queue_factory()


@pytest.fixture(params=["memory", "redis"])
def registry(request):
    """A registry of the parametrised backend on a ManualClock (`registry.clock`), so tests step its time."""
    from luminal.scheduler.registry import open_registry
    from luminal.store.clock import ManualClock

    if request.param == "memory":
        made = open_registry("", clock=ManualClock())
    else:
        made = open_registry(REDIS_URL, request.getfixturevalue("redis_namespace"), ManualClock())
    yield made
    made.close()
