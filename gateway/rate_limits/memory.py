"""The embedded platform's rate limiter: the tenants' TATs in a dict of this process.

Called only from the event loop, with no await between reading and writing a TAT, so it needs no lock.
"""

from __future__ import annotations

from collections.abc import Callable

from luminal.gateway.rate_limits.base import gcra


class MemoryRateLimiter:
    def __init__(self, clock: Callable[[], float]):
        self.clock = clock  # monotonic seconds; tests pass one they step
        self._tats: dict[int, float] = {}  # one float per tenant that has a rate quota

    async def admit(self, tenant_id: int, per_second: float) -> float:
        tat, wait = gcra(self._tats.get(tenant_id), self.clock(), per_second)
        self._tats[tenant_id] = tat
        return wait

    async def close(self) -> None:
        self._tats.clear()
