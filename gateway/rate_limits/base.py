"""The rate-limit rule, shared by every backend: GCRA (the generic cell rate algorithm), a token bucket kept as
one number per tenant, the theoretical arrival time (TAT) of its next request.

At `per_second` requests a second, each request moves the TAT one interval (1 / per_second) ahead; a request
is admitted while the TAT is at most one second's worth of requests (`burst_span`) ahead of now, so a tenant
may send a second's allowance at once and then keeps to the rate. A refused request changes nothing.
"""

from __future__ import annotations

from typing import Protocol

# TATs are sums of float intervals: ten requests of 0.1 s must not come to 1.0000000000000002 and refuse the tenth.
TOLERANCE_S = 1e-9


class RateLimiter(Protocol):
    async def admit(self, tenant_id: int, per_second: float) -> float:
        """Take one request from the tenant's allowance: 0.0 when admitted, else the seconds until a request
        would be (and nothing is taken)."""
        ...

    async def close(self) -> None: ...


def shape(per_second: float) -> tuple[float, float]:
    """(interval, burst_span) in seconds for a rate: at least one request is always allowed at once."""
    interval = 1.0 / per_second
    return interval, (max(1.0, per_second) - 1.0) * interval


def gcra(tat: float | None, now: float, per_second: float) -> tuple[float, float]:
    """(the TAT to store, the wait): a wait of 0.0 admits the request; otherwise the TAT is unchanged."""
    interval, burst_span = shape(per_second)
    tat = now if tat is None or tat < now else tat
    wait = tat - burst_span - now
    if wait > TOLERANCE_S:
        return tat, wait
    return tat + interval, 0.0
