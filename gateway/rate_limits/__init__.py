"""Per-tenant request-rate limits; `open_rate_limiter` picks the backend the way the queues do: in-process for
the embedded platform, Redis when gateway replicas share a queue URL (so they share each tenant's allowance)."""

from __future__ import annotations

import time
from collections.abc import Callable

from luminal.gateway.rate_limits.base import RateLimiter

__all__ = ["RateLimiter", "open_rate_limiter"]


def open_rate_limiter(queue_url: str, namespace: str, clock: Callable[[], float] | None = None) -> RateLimiter:
    if queue_url.strip().startswith(("redis://", "rediss://")):
        from luminal.gateway.rate_limits.redis_limiter import RedisRateLimiter  # imports redis only when asked for

        return RedisRateLimiter(queue_url.strip(), namespace, clock or time.time)
    from luminal.gateway.rate_limits.memory import MemoryRateLimiter

    return MemoryRateLimiter(clock or time.monotonic)
