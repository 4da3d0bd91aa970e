"""Cache coherence between gateway replicas: a change to keys, tenants, models or deployments made through one
gateway clears the hot-path caches (`Platform.clear_caches`) of every other gateway at once, not after
`LUMINAL_METADATA_CACHE_S`.

Why a Redis pub/sub channel, not a version counter in the metadata store: a counter must be read on every request
to be current (one more database round trip on the hot path, the cost the caches exist to avoid), or polled, which
only shortens the window. A published message costs nothing per request and reaches every subscriber before the
changing request's answer leaves its gateway: the change is committed, then published (`publish` returns once
every subscriber's copy is sent), then answered. The subscriber runs on the gateway's event loop, so a request
that arrives after the message is handled after it.
Several gateways need Redis anyway (the shared queues, the provisioner lease), so without Redis there is one
gateway and nothing to tell: `NoMetadataChanges`.

Pub/sub delivers at most once: a gateway cut off from Redis may miss a message. Its subscriber clears the caches
whenever it (re)subscribes, and meanwhile the caches' own time limit bounds how stale an entry can get. A clear
racing a lookup is safe: a fill started before a clear is dropped (`TtlCache.put` checks the generation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)
RESUBSCRIBE_BACKOFF_S = (0.1, 5.0)  # first and longest wait before subscribing again after Redis failed


class MetadataChanges(Protocol):
    async def start(self, on_change: Callable[[], None]) -> None:
        """Call `on_change` for every change another gateway (or this one) publishes, from now on."""

    async def publish(self) -> None:
        """Tell every gateway that metadata changed (after the change is committed)."""

    async def close(self) -> None: ...


class NoMetadataChanges:
    """One gateway without Redis: its own changes clear its caches directly; nobody else is told."""

    async def start(self, on_change: Callable[[], None]) -> None:
        pass

    async def publish(self) -> None:
        pass

    async def close(self) -> None:
        pass


class RedisMetadataChanges:
    def __init__(self, url: str, namespace: str, client_name: str = "luminal-metadata-changes"):
        import redis.asyncio  # only where Redis is configured

        self.channel = f"{namespace}:metadata-changed"
        self._redis = redis.asyncio.Redis.from_url(url, client_name=client_name)  # named in CLIENT LIST
        self._task: asyncio.Task | None = None
        self._subscribed = asyncio.Event()

    async def start(self, on_change: Callable[[], None]) -> None:
        """Subscribes before returning, so no change published after the gateway starts serving is missed."""
        self._task = asyncio.create_task(self._listen(on_change), name="metadata-changes")
        waiting = asyncio.create_task(self._subscribed.wait())
        await asyncio.wait([waiting, self._task], timeout=10, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if not self._subscribed.is_set():  # Redis is down: the loop keeps trying; the caches' time limit holds
            log.warning("metadata changes: not subscribed to %s yet; retrying in the background", self.channel)

    async def publish(self) -> None:
        """Returns once every subscriber's copy is written to its socket. Redis answers the publisher before it
        writes the subscribers' copies (a loaded machine may pause it in between), so PUBLISH's reply alone
        would let this gateway answer, and its client ask another gateway, before that one's copy was sent; but
        Redis sends all that a command produced before it runs a later one, so once a PING answers, every copy
        is out, and a request sent after this gateway's answer reaches the other gateway after its message."""
        try:
            await self._redis.publish(self.channel, b"1")
            await self._redis.ping()
        except Exception:  # the change is made; other gateways see it within the caches' time limit instead
            log.exception("metadata changes: could not publish on %s", self.channel)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._redis.aclose()

    async def _listen(self, on_change: Callable[[], None]) -> None:
        backoff = RESUBSCRIBE_BACKOFF_S[0]
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    async for message in pubsub.listen():
                        if message["type"] == "subscribe":  # Redis confirmed: every later publish reaches us
                            on_change()  # whatever was published while this gateway was not subscribed
                            self._subscribed.set()
                            backoff = RESUBSCRIBE_BACKOFF_S[0]
                        elif message["type"] == "message":
                            on_change()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("metadata changes: lost %s; subscribing again in %.1f s", self.channel, backoff)
                on_change()  # messages may be missed until the next subscription: no entry is trusted
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RESUBSCRIBE_BACKOFF_S[1])


def open_metadata_changes(queue_url: str, namespace: str) -> MetadataChanges:
    """The Redis channel when the gateways share Redis (LUMINAL_QUEUE_URL=redis://...), else nothing to tell."""
    if queue_url.strip().startswith(("redis://", "rediss://")):
        return RedisMetadataChanges(queue_url.strip(), namespace)
    return NoMetadataChanges()
