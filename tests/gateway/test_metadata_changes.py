"""The metadata-change channel on a real Redis: a subscriber clears its caches when it subscribes (it may have
missed messages before) and on every change another gateway publishes; gateways of another platform (another
key prefix) are not disturbed; a subscriber whose connection Redis drops clears its caches and subscribes again;
without Redis nothing is told. A change is sent to every subscriber before `publish` returns, and a request
read after it is handled after the caches were cleared, on either event loop the gateway may run: together, a
client that asks one gateway right after another answered a change is answered as of that change."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

import pytest
import redis
import uvloop

from luminal.gateway.metadata_changes import NoMetadataChanges, RedisMetadataChanges, open_metadata_changes
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401


async def _wait_for(count: list[int], n: int) -> None:
    async with asyncio.timeout(30):
        while count[0] < n:
            await asyncio.sleep(0.01)


def test_a_published_change_clears_every_subscribers_caches(redis_namespace):  # noqa: F811
    async def scenario() -> tuple[list[int], list[int]]:
        cleared, elsewhere = [0], [0]
        b = RedisMetadataChanges(REDIS_URL, redis_namespace)
        other_platform = RedisMetadataChanges(REDIS_URL, redis_namespace + "-other")
        a = RedisMetadataChanges(REDIS_URL, redis_namespace)
        await b.start(lambda: cleared.__setitem__(0, cleared[0] + 1))
        await other_platform.start(lambda: elsewhere.__setitem__(0, elsewhere[0] + 1))
        assert cleared == [1] and elsewhere == [1]  # cleared once on subscribing
        await a.publish()
        await _wait_for(cleared, 2)
        await a.publish()
        await a.publish()
        await _wait_for(cleared, 4)
        await asyncio.sleep(0.2)  # time for a stray message to reach the other platform's subscriber
        for changes in (a, b, other_platform):
            await changes.close()
        return cleared, elsewhere

    cleared, elsewhere = asyncio.run(scenario())
    assert cleared == [4] and elsewhere == [1]


def test_a_dropped_subscription_clears_the_caches_and_subscribes_again(redis_namespace):  # noqa: F811
    async def scenario() -> list[int]:
        cleared = [0]
        b = RedisMetadataChanges(REDIS_URL, redis_namespace, client_name=f"{redis_namespace}-b")
        a = RedisMetadataChanges(REDIS_URL, redis_namespace)
        await b.start(lambda: cleared.__setitem__(0, cleared[0] + 1))
        admin = redis.Redis.from_url(REDIS_URL)
        ours = [c["id"] for c in admin.client_list(_type="pubsub") if c["name"] == f"{redis_namespace}-b"]
        assert len(ours) == 1
        admin.client_kill_filter(_id=ours[0])  # what a network failure or a Redis restart does to it
        admin.close()
        await _wait_for(cleared, 3)  # cleared when the subscription broke, and again on subscribing
        await a.publish()  # subscribed again: changes reach it
        await _wait_for(cleared, 4)
        for changes in (a, b):
            await changes.close()
        return cleared

    assert asyncio.run(scenario()) == [4]


def test_every_subscriber_holds_the_change_when_publish_returns(redis_namespace):  # noqa: F811
    # Redis answers PUBLISH before it writes the subscribers' copies; many subscribers make that gap long enough
    # to see (without the barrier in `publish`, most rounds find copies not yet sent).
    changes = RedisMetadataChanges(REDIS_URL, redis_namespace)
    channel = changes.channel.encode()
    redis_at = urlsplit(REDIS_URL)
    subscribers = [socket.create_connection((redis_at.hostname, redis_at.port or 6379)) for _ in range(300)]
    try:
        for s in subscribers:
            s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel))
        for s in subscribers:
            assert s.recv(4096).startswith(b"*3\r\n$9\r\nsubscribe")

        async def rounds() -> list[int]:
            unsent = []
            for _ in range(5):
                await changes.publish()
                unsent.append(sum(not _holds_message(s) for s in subscribers))
                for s in subscribers:  # a copy sent late is read here, not taken for the next round's
                    _read_message(s)
            await changes.close()
            return unsent

        assert asyncio.run(rounds()) == [0] * 5
    finally:
        for s in subscribers:
            s.close()


def _read_message(subscriber: socket.socket) -> None:
    subscriber.settimeout(5)
    data = b""
    while not data.endswith(b"\r\n$1\r\n1\r\n"):  # the message's last field: the payload "1"
        chunk = subscriber.recv(4096)
        assert chunk, "Redis closed a subscriber's connection"
        data += chunk


def _holds_message(subscriber: socket.socket) -> bool:
    subscriber.setblocking(False)  # a socket with a timeout would wait for the copy
    try:
        return subscriber.recv(4096, socket.MSG_PEEK | socket.MSG_DONTWAIT).startswith(b"*3\r\n$7\r\nmessage")
    except BlockingIOError:
        return False


@pytest.mark.parametrize("new_loop", [asyncio.new_event_loop, uvloop.new_event_loop], ids=["asyncio", "uvloop"])
def test_a_request_read_after_a_change_is_handled_after_the_clear(redis_namespace, new_loop):  # noqa: F811
    # The loop is held (blocking calls on its thread) while the change is published and the "request" sent, so
    # both sockets are readable in the same poll, as when a client asks one gateway right after another answered.
    async def scenario() -> list[int]:
        loop, cleared, seen = asyncio.get_running_loop(), [0], []
        changes = RedisMetadataChanges(REDIS_URL, redis_namespace)
        await changes.start(lambda: cleared.__setitem__(0, cleared[0] + 1))
        connected = asyncio.Event()

        class Requests(asyncio.Protocol):  # as uvicorn's: a request's handler is a task started on its bytes
            def connection_made(self, transport) -> None:
                connected.set()

            def data_received(self, data: bytes) -> None:
                loop.create_task(handle())

        async def handle() -> None:
            seen.append(cleared[0])  # what the request's cache lookups would see

        server = await loop.create_server(Requests, "127.0.0.1", 0)
        publisher = redis.Redis.from_url(REDIS_URL)
        with socket.create_connection(server.sockets[0].getsockname()) as client:
            await connected.wait()
            for n in range(20):
                assert publisher.publish(changes.channel, b"1") == 1
                publisher.ping()  # as `publish` does: our copy is sent before the "request" is
                client.sendall(b"GET")
                async with asyncio.timeout(10):
                    while len(seen) <= n:
                        await asyncio.sleep(0.001)
        publisher.close()
        server.close()
        await changes.close()
        return seen

    with asyncio.Runner(loop_factory=new_loop) as runner:
        seen = runner.run(scenario())
    assert seen == [2 + n for n in range(20)]  # once on subscribing, then once per change before its request


def test_the_channel_is_chosen_by_the_queue_url():
    assert isinstance(open_metadata_changes("", "lm"), NoMetadataChanges)  # one gateway: nobody to tell
    changes = open_metadata_changes(f" {REDIS_URL} ", "lm")
    assert isinstance(changes, RedisMetadataChanges) and changes.channel == "lm:metadata-changed"
    asyncio.run(changes.close())
