"""The metadata-change channel on a real Redis: a subscriber clears its caches when it subscribes (it may have
missed messages before) and on every change another gateway publishes; gateways of another platform (another
key prefix) are not disturbed; a subscriber whose connection Redis drops clears its caches and subscribes again;
without Redis nothing is told."""

from __future__ import annotations

import asyncio

import redis

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


def test_the_channel_is_chosen_by_the_queue_url():
    assert isinstance(open_metadata_changes("", "lm"), NoMetadataChanges)  # one gateway: nobody to tell
    changes = open_metadata_changes(f" {REDIS_URL} ", "lm")
    assert isinstance(changes, RedisMetadataChanges) and changes.channel == "lm:metadata-changed"
    asyncio.run(changes.close())
