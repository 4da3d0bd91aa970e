"""With Redis queues, gateway replicas share each tenant's requests-per-second allowance: a request through
another replica (a second limiter on the same Redis namespace) counts against the tenant here. The clock is
stepped by the test, never waited on."""

from __future__ import annotations

import asyncio

import pytest

from luminal.gateway.rate_limits.redis_limiter import RedisRateLimiter
from tests.gateway.tenancy import SteppedClock, new_tenant, settings_with_admin
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401


@pytest.fixture
def settings(tmp_path, redis_namespace):  # noqa: F811
    base = settings_with_admin(tmp_path, f"sqlite:///{tmp_path / 'meta.db'}")
    return base.model_copy(update={"queue_url": REDIS_URL, "queue_namespace": redis_namespace})


def test_replicas_share_a_tenants_allowance(server, redis_namespace):  # noqa: F811
    limiter = server.platform.rate_limiter
    assert isinstance(limiter, RedisRateLimiter)
    clock = limiter.clock = SteppedClock()
    tenant, beta = new_tenant(server, "beta", max_requests_per_second=3)
    other_replica = RedisRateLimiter(REDIS_URL, redis_namespace, clock)
    assert asyncio.run(other_replica.admit(tenant["id"], 3)) == 0.0
    assert asyncio.run(other_replica.admit(tenant["id"], 3)) == 0.0
    assert beta.get("/v1/models").status_code == 200  # the third of this second's three
    refused = beta.get("/v1/models")
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1", refused.text
    clock.now += 1 / 3
    assert beta.get("/v1/models").status_code == 200
    asyncio.run(other_replica.close())
