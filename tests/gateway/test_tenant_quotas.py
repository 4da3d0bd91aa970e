"""Each per-tenant quota answered 429 with Retry-After through a real server, on SQLite and PostgreSQL: the
number of deployments, replicas through the deployment and scaling API, and requests per second on a limiter
whose clock the test steps. Lifting or raising a quota lets the refused request through; other tenants are
untouched."""

from __future__ import annotations

import pytest

from luminal.gateway.rate_limits.memory import MemoryRateLimiter
from luminal.graph_file import graph_to_bytes
from tests.gateway.conftest import tiny_graph, upload
from tests.gateway.tenancy import SteppedClock, admin, new_tenant, settings_with_admin


@pytest.fixture
def settings(tmp_path, database_url):
    return settings_with_admin(tmp_path, database_url)


@pytest.fixture
def drained(server):
    """Waits, after the test, for the compiles its deployments started."""
    yield server
    server.platform.compiles.drain(timeout=120)


def refused(response, message: str) -> None:
    assert response.status_code == 429, response.text
    assert message in response.json()["error"], response.text
    assert int(response.headers["Retry-After"]) >= 1


def two_versions(client, model_bytes) -> None:
    upload(client, "tiny", model_bytes)
    upload(client, "tiny", graph_to_bytes(tiny_graph(features=5)))


def test_deployments_quota(drained, model_bytes):
    tenant, beta = new_tenant(drained, "beta", max_deployments=1)
    two_versions(beta, model_bytes)
    first = beta.post("/v1/deployments", json={"model": "tiny", "version": 1})
    assert first.status_code == 202, first.text
    second = beta.post("/v1/deployments", json={"model": "tiny", "version": 2})
    refused(second, "this tenant's quota is 1 deployment(s) and it has 1: delete one")
    assert len(beta.get("/v1/deployments").json()) == 1  # nothing was half-made
    two_versions(drained.client(), model_bytes)  # another tenant has no such quota
    assert drained.client().post("/v1/deployments", json={"model": "tiny", "version": 2}).status_code == 202

    admin(drained).patch(f"/v1/admin/tenants/{tenant['id']}", json={"max_deployments": 2})
    assert beta.post("/v1/deployments", json={"model": "tiny", "version": 2}).status_code == 202
    assert admin(drained).get(f"/v1/admin/tenants/{tenant['id']}").json()["deployments"] == 2


def test_replicas_quota_in_the_deployment_and_scaling_api(drained, model_bytes):
    _, beta = new_tenant(drained, "beta", max_replicas=2)
    two_versions(beta, model_bytes)

    def deploy(version: int, low: int, high: int):
        body = {"model": "tiny", "version": version, "min_replicas": low, "max_replicas": high}
        return beta.post("/v1/deployments", json=body)

    refused(deploy(1, 0, 3), "max_replicas 3 exceeds this tenant's quota of 2 replica(s)")
    first = deploy(1, 1, 2)
    assert first.status_code == 202, first.text
    refused(deploy(2, 2, 2), "min_replicas 2 would keep 3 replica(s) warm across this tenant's deployments, over its")
    second = deploy(2, 1, 2)
    assert second.status_code == 202, second.text

    path = f"/v1/deployments/{first.json()['id']}"
    refused(beta.patch(path, json={"min_replicas": 2}), "would keep 3 replica(s) warm")
    refused(beta.patch(path, json={"max_replicas": 3}), "max_replicas 3 exceeds this tenant's quota of 2")
    assert beta.patch(path, json={"max_batch_size": 16}).status_code == 200  # not a replica change
    assert beta.patch(path, json={"min_replicas": 0}).status_code == 200
    assert beta.patch(f"/v1/deployments/{second.json()['id']}", json={"min_replicas": 2}).status_code == 200


def test_requests_per_second_quota(server):
    clock = SteppedClock()
    server.platform.rate_limiter = MemoryRateLimiter(clock)
    tenant, beta = new_tenant(server, "beta", max_requests_per_second=2)
    assert [beta.get("/v1/models").status_code for _ in range(2)] == [200, 200]  # a second's worth at once
    over = beta.get("/v1/keys")  # every route of the tenant counts
    refused(over, "tenant 'beta' is over its quota of 2 requests per second; retry in 0.50 s")
    assert over.headers["Retry-After"] == "1"  # whole seconds, rounded up
    assert [server.client().get("/v1/models").status_code for _ in range(5)] == [200] * 5  # no quota
    clock.now += 0.5
    assert beta.get("/v1/models").status_code == 200
    assert beta.get("/v1/models").status_code == 429

    admin(server).patch(f"/v1/admin/tenants/{tenant['id']}", json={"max_requests_per_second": None})
    assert [beta.get("/v1/models").status_code for _ in range(5)] == [200] * 5
