"""The worker's lean blocking Redis client against real Redis: replies and error replies, scripts loaded on first
use, the URL's database honoured, one connection per thread, a connection the server drops replaced, and the
queue's worker side (take, blocking read, completion) answering through it."""

from __future__ import annotations

import threading
import uuid

import numpy as np
import pytest
import redis

from luminal.scheduler.queues import resp_async, resp_sync
from luminal.scheduler.queues.redis_streams import RedisStreamsQueue
from luminal.scheduler.work import OK, InferenceRequest, InferenceResult
from tests.scheduler.queue_fixtures import REDIS_URL

pytestmark = pytest.mark.skipif(resp_async.hiredis is None, reason="the lean client needs hiredis")


@pytest.fixture
def key(redis_namespace) -> str:
    return f"{redis_namespace}:k"


@pytest.fixture
def client():
    client = resp_sync.SyncRespClient(REDIS_URL)
    yield client
    client.close()


def test_replies_and_error_replies(client, key):
    assert client.call("RPUSH", key, b"\x00\xffbinary", 7) == 2
    assert client.call("LRANGE", key, 0, -1) == [b"\x00\xffbinary", b"7"]
    with pytest.raises(redis.ResponseError, match="unknown command"):
        client.call("NOSUCHCOMMAND")
    assert client.call("PING") == b"PONG"  # the connection is still in step
    assert client.call("BLPOP", f"{key}:empty", 0.01) is None  # a blocking read that times out


def test_a_script_the_server_lacks_is_loaded_then_called_by_its_hash(client, key):
    script = f"return {{KEYS[1], ARGV[1], '{uuid.uuid4().hex}'}}".encode()  # never seen by this server
    assert client.evalsha(script, [key], ["a"])[:2] == [key.encode(), b"a"]
    assert client.evalsha(script, [key], ["b"])[:2] == [key.encode(), b"b"]


def test_the_urls_database_is_selected(key):
    other_db = REDIS_URL.rsplit("/", 1)[0] + "/3"
    client, plain = resp_sync.SyncRespClient(other_db), redis.Redis.from_url(other_db)
    try:
        client.call("SET", key, "in db 3")
        assert plain.get(key) == b"in db 3"
    finally:
        plain.delete(key)
        plain.close()
        client.close()


def test_each_thread_has_its_own_connection(client, key):
    """A thread blocked in BLPOP holds its connection alone: another thread's commands still answer."""
    popped = []
    blocked = threading.Thread(target=lambda: popped.append(client.call("BLPOP", key, 5)))
    blocked.start()
    for _ in range(100):
        if client.call("CLIENT", "LIST", "TYPE", "normal").count(b"cmd=blpop") >= 1:
            break
        threading.Event().wait(0.01)
    assert client.call("RPUSH", key, b"v") == 1
    blocked.join(10)
    assert popped == [[key.encode(), b"v"]]


def test_a_connection_the_server_drops_is_replaced(client, key):
    client.call("PING")
    killer = redis.Redis.from_url(REDIS_URL)
    for connection in list(client._all):  # as a Redis restart would: the server drops them
        port = connection._socket.getsockname()[1]
        killer.execute_command("CLIENT", "KILL", "ADDR", f"127.0.0.1:{port}")
    killer.close()
    assert client.call("RPUSH", key, b"v") == 1
    assert client.call("LPOP", key) == b"v"


def test_the_queues_worker_side_goes_through_it(redis_namespace):
    queue = RedisStreamsQueue(REDIS_URL, namespace=redis_namespace)
    assert queue._lean_sync is not None
    try:
        request = InferenceRequest(deployment_id=1, tenant_id=1, inputs={"x": np.arange(3, dtype=np.float32)})
        blocked = []
        taker = threading.Thread(target=lambda: blocked.extend(queue.take(1, "w1", 4, wait_s=5)))
        taker.start()  # finds nothing, then blocks in XREADGROUP until the request arrives
        threading.Event().wait(0.2)
        queue.submit(request, max_depth=10)
        taker.join(10)
        assert [d.request.id for d in blocked] == [request.id]
        assert blocked[0].request.inputs["x"].tolist() == [0.0, 1.0, 2.0]
        queue.complete_all([(blocked[0], InferenceResult(request.id, OK, {"y": np.ones(2, np.float32)}))])
        assert queue.in_flight(1) == 0
        assert queue._redis.llen(queue._result_key(request.id)) == 1  # stored for the gateway's wait
    finally:
        queue.close()
