"""The gateway's lean Redis client against real Redis: replies matched to their callers under concurrency, error
replies raised, scripts loaded on first use, the URL's database honoured, a cancelled blocking wait that can never
swallow a later value, and the queue falling back to redis.asyncio where the client cannot serve."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from luminal.scheduler.queues import resp_async
from luminal.scheduler.queues.redis_streams import RedisStreamsQueue
from tests.scheduler.queue_fixtures import REDIS_URL

pytestmark = pytest.mark.skipif(resp_async.hiredis is None, reason="the lean client needs hiredis")


@pytest.fixture
def key(redis_namespace) -> str:
    return f"{redis_namespace}:k"


def test_concurrent_calls_each_get_their_own_reply(key):
    async def main():
        client = resp_async.RespClient(REDIS_URL)
        try:
            replies = await asyncio.gather(*(client.call("ECHO", f"m{i}") for i in range(200)))
            assert replies == [f"m{i}".encode() for i in range(200)]
            assert await client.call("RPUSH", key, b"\x00\xffbinary") == 1
            assert await client.call("LPOP", key) == b"\x00\xffbinary"
            with pytest.raises(redis.ResponseError, match="unknown command"):
                await client.call("NOSUCHCOMMAND")
            assert await client.call("PING") == b"PONG"  # the connection is still in step
        finally:
            client.close()

    asyncio.run(main())


def test_a_script_the_server_lacks_is_loaded_then_called_by_its_hash(key):
    script = f"return {{KEYS[1], ARGV[1], '{uuid.uuid4().hex}'}}".encode()  # never seen by this server

    async def main():
        client = resp_async.RespClient(REDIS_URL)
        try:
            first = await client.evalsha(script, [key], ["a"])
            second = await client.evalsha(script, [key], ["b"])
            return first, second
        finally:
            client.close()

    first, second = asyncio.run(main())
    assert first[:2] == [key.encode(), b"a"] and second[:2] == [key.encode(), b"b"]


def test_the_urls_database_is_selected(key):
    other_db = REDIS_URL.rsplit("/", 1)[0] + "/3"
    plain = redis.Redis.from_url(other_db)
    plain.rpush(key, b"in-db-3")

    async def main():
        client = resp_async.RespClient(other_db)
        try:
            return await client.call("LPOP", key)
        finally:
            client.close()

    try:
        assert asyncio.run(main()) == b"in-db-3"
    finally:
        plain.delete(key)
        plain.close()


def test_a_cancelled_blocking_wait_never_takes_a_later_value(key):
    async def main():
        client = resp_async.RespClient(REDIS_URL)
        try:
            waiting = asyncio.create_task(client.call_blocking("BLPOP", key, 5))
            await asyncio.sleep(0.2)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await asyncio.sleep(0.1)  # the server sees the closed connection and drops its BLPOP
            await client.call("RPUSH", key, b"later")
            return await client.call_blocking("BLPOP", key, 5)
        finally:
            client.close()

    assert asyncio.run(main()) == [key.encode(), b"later"]


def test_the_queue_uses_the_lean_client_only_where_it_can(monkeypatch, redis_namespace):
    assert resp_async.supports("redis://127.0.0.1:6379/0")
    assert not resp_async.supports("rediss://127.0.0.1:6380/0")
    monkeypatch.setattr(resp_async, "hiredis", None)
    assert not resp_async.supports("redis://127.0.0.1:6379/0")
    queue = RedisStreamsQueue(REDIS_URL, redis_namespace)  # redis.asyncio then, as before
    assert queue._lean is False
    queue.close()


@pytest.mark.parametrize("lean", [True, False])
def test_admission_and_results_through_either_client(lean, redis_namespace):
    import numpy as np

    from luminal.scheduler.work import OK, InferenceRequest, InferenceResult

    queue = RedisStreamsQueue(REDIS_URL, redis_namespace)
    queue._lean = lean and queue._lean

    async def main():
        request = InferenceRequest(5, 1, {"x": np.arange(4, dtype=np.float32)})
        await queue.enqueue(request, 10)
        [delivery] = await asyncio.to_thread(queue.take, 5, "w", 1, 1.0)
        waiting = asyncio.create_task(queue.wait_result(request.id, 5))
        await asyncio.sleep(0.05)
        await asyncio.to_thread(
            queue.complete_all, [(delivery, InferenceResult(request.id, OK, {"y": np.ones(2, np.float32)}))]
        )
        return await waiting

    try:
        result = asyncio.run(main())
    finally:
        queue.close()
    assert result.status == OK and result.outputs["y"].tolist() == [1.0, 1.0]


def test_connections_closed_under_it_are_replaced(key):
    async def main():
        client = resp_async.RespClient(REDIS_URL)
        try:
            await client.call("PING")
            await client.call_blocking("LPOP", key)  # leaves one idle connection for blocking commands
            killer = redis.Redis.from_url(REDIS_URL)
            for connection in client._all:  # as a Redis restart would: the server drops them
                port = connection.transport.get_extra_info("sockname")[1]
                killer.execute_command("CLIENT", "KILL", "ADDR", f"127.0.0.1:{port}")
            killer.close()
            await asyncio.sleep(0.1)
            await client.call("RPUSH", key, b"v")
            return await client.call_blocking("BLPOP", key, 1)
        finally:
            client.close()

    assert asyncio.run(main()) == [key.encode(), b"v"]
