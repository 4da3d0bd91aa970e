"""What the tenant of a valid key must still pass before its request runs: not suspended, and within its
requests-per-second quota. Checked in the authentication dependency, so no tenant route can forget it."""

from __future__ import annotations

import math

from luminal.gateway.errors import ApiError
from luminal.gateway.rate_limits import RateLimiter
from luminal.store.tables import Tenant


async def check_standing(tenant: Tenant, limiter: RateLimiter) -> None:
    if tenant.suspended_at is not None:
        why = f" ({tenant.suspension_reason})" if tenant.suspension_reason else ""
        raise ApiError(
            403,
            f"tenant {tenant.name!r} is suspended since {tenant.suspended_at.isoformat(timespec='seconds')}{why}: "
            "its API keys are refused until an administrator resumes it",
        )
    per_second = tenant.max_requests_per_second
    if per_second is None:
        return
    wait = await limiter.admit(tenant.id, per_second)
    if wait > 0:
        raise ApiError(
            429,
            f"tenant {tenant.name!r} is over its quota of {per_second:g} requests per second; retry in {wait:.2f} s",
            {"Retry-After": str(max(1, math.ceil(wait)))},
        )
