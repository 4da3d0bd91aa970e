"""The rate limiter gateway replicas share: each tenant's TAT is one Redis key, read and moved by a Lua script
so that concurrent requests through different replicas cannot both take the last slot.

`now` comes from the gateway's clock (epoch seconds), not Redis' TIME, so tests can step it; replicas' clocks
then need to agree to well under one interval, which NTP gives for any rate a quota would set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import redis.asyncio
from redis.commands.core import AsyncScript

from luminal.gateway.rate_limits.base import TOLERANCE_S, shape

# KEYS[1]: the tenant's TAT. ARGV: now, interval, burst_span. Returns the wait as a string (Redis would truncate
# a Lua float reply to an integer). The key expires once the allowance is full again: then it carries nothing.
ADMIT = f"""
local now, interval, span = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or ARGV[1])
if tat < now then tat = now end
local wait = tat - span - now
if wait > {TOLERANCE_S} then return string.format('%.6f', wait) end
tat = tat + interval
redis.call('SET', KEYS[1], string.format('%.6f', tat), 'PX', math.ceil((tat - now) * 1000) + 1000)
return '0'
"""


class RedisRateLimiter:
    def __init__(self, url: str, namespace: str, clock: Callable[[], float]):
        self._url, self._namespace = url, namespace
        self.clock = clock  # epoch seconds, comparable between replicas
        # redis.asyncio clients belong to the event loop they were made on: one (with its script) per loop.
        self._clients: dict[asyncio.AbstractEventLoop, tuple[redis.asyncio.Redis, AsyncScript]] = {}

    def _script(self) -> AsyncScript:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            client = redis.asyncio.Redis.from_url(self._url)
            self._clients[loop] = (client, client.register_script(ADMIT))
        return self._clients[loop][1]

    async def admit(self, tenant_id: int, per_second: float) -> float:
        interval, burst_span = shape(per_second)
        key = f"{self._namespace}:rate:{tenant_id}"
        wait = await self._script()(keys=[key], args=[repr(self.clock()), repr(interval), repr(burst_span)])
        return float(wait)

    async def close(self) -> None:
        mine = self._clients.pop(asyncio.get_running_loop(), None)
        if mine is not None:
            await mine[0].aclose()
        self._clients.clear()  # clients of loops that are gone are dropped with them
