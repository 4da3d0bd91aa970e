"""The per-tenant rate limit on a clock the test steps (never wall-clock windows): a second's allowance at once,
then the rate; a refused request takes nothing; fractional rates; tenants apart. The same cases run on the
in-process limiter and on Redis, where two limiters stand for two gateway replicas sharing one allowance."""

from __future__ import annotations

import asyncio

import pytest

from luminal.gateway.rate_limits import open_rate_limiter
from luminal.gateway.rate_limits.base import gcra
from tests.gateway.tenancy import SteppedClock
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401


@pytest.fixture(params=["memory", "redis"])
def limiters(request):
    """A factory of limiters sharing one store (one process's dict, or one Redis namespace) and one clock."""
    clock = SteppedClock()
    if request.param == "memory":
        shared = open_rate_limiter("", "lm", clock)
        made = [shared]
        yield clock, lambda: shared
    else:
        namespace = request.getfixturevalue("redis_namespace")
        made = []

        def make():
            made.append(open_rate_limiter(REDIS_URL, namespace, clock))
            return made[-1]

        yield clock, make
    for limiter in made:
        asyncio.run(limiter.close())


def admits(limiter, tenant_id: int, per_second: float, times: int) -> list[float]:
    async def run() -> list[float]:
        return [await limiter.admit(tenant_id, per_second) for _ in range(times)]

    return asyncio.run(run())


def test_a_seconds_allowance_at_once_then_the_rate(limiters):
    clock, make = limiters
    limiter = make()
    waits = admits(limiter, 1, 10, 12)
    assert waits[:10] == [0.0] * 10
    assert waits[10] == pytest.approx(0.1, abs=1e-5) and waits[11] == pytest.approx(0.1, abs=1e-5)  # nothing taken
    clock.now += 0.1
    assert admits(limiter, 1, 10, 2) == [0.0, pytest.approx(0.1, abs=1e-5)]
    clock.now += 5  # idle: the allowance refills to one second's worth, not more
    assert admits(limiter, 1, 10, 11)[9:] == [0.0, pytest.approx(0.1, abs=1e-5)]


def test_a_fractional_rate_allows_one_request_per_interval(limiters):
    clock, make = limiters
    limiter = make()
    assert admits(limiter, 1, 0.5, 2) == [0.0, pytest.approx(2.0, abs=1e-5)]
    clock.now += 1.5
    assert admits(limiter, 1, 0.5, 1) == [pytest.approx(0.5, abs=1e-5)]
    clock.now += 0.5
    assert admits(limiter, 1, 0.5, 1) == [0.0]


def test_tenants_have_allowances_of_their_own(limiters):
    _, make = limiters
    limiter = make()
    assert admits(limiter, 1, 1, 2)[1] > 0
    assert admits(limiter, 2, 1, 1) == [0.0]


def test_limiters_sharing_a_store_share_the_allowance(limiters):
    """With Redis these are two gateway replicas: the tenant's 4 requests a second hold across both."""
    clock, make = limiters
    first, second = make(), make()
    assert admits(first, 1, 4, 3) == [0.0] * 3
    assert admits(second, 1, 4, 2) == [0.0, pytest.approx(0.25, abs=1e-5)]
    clock.now += 0.25
    assert admits(first, 1, 4, 1) == [0.0]


def test_the_rule_itself():
    tat, wait = gcra(None, 100.0, 2)
    assert (tat, wait) == (100.5, 0.0)
    assert gcra(100.5, 100.0, 2) == (101.0, 0.0)  # the burst: a second's worth at once
    assert gcra(101.0, 100.0, 2) == (101.0, 0.5)  # refused: the TAT does not move
    assert gcra(90.0, 100.0, 2) == (100.5, 0.0)  # an old TAT counts as now: no credit saved up past a burst
