"""Caches coherent across gateways: two `luminal serve` processes on one PostgreSQL and Redis, each caching keys,
tenants and ready deployments for 60 s (LUMINAL_METADATA_CACHE_S). A change made through gateway A is seen by
gateway B on the very next request: a revoked key, a suspended and resumed tenant, a deleted deployment. Without
the Redis channel B would act on its cached copies for a minute (gateway/metadata_changes.py)."""

from __future__ import annotations

import numpy as np
import pytest
import redis

import luminal as lm
from tests.gateway.conftest import _fresh_postgres_schema, tiny_graph
from tests.scaleout.cluster import Gateway, Shared, close_all, deploy
from tests.scheduler.queue_fixtures import REDIS_URL

KEY = "lm_coherence-bootstrap-key-0123456789ab"
ADMIN_TOKEN = "coherence-admin-token-0123456789"


@pytest.fixture
def gateways(postgres_database: str, redis_namespace: str, tmp_path):
    _fresh_postgres_schema(postgres_database)
    extra = {
        "LUMINAL_METADATA_CACHE_S": "60",  # far longer than the test: only the channel can explain a refusal
        "LUMINAL_ADMIN_TOKEN": ADMIN_TOKEN,
        "LUMINAL_COMPILE_RUNNER": "process",  # compiled by gateway A's child, served by thread workers
        "LUMINAL_WORKER_BACKEND": "thread",
    }
    shared = Shared(postgres_database, REDIS_URL, redis_namespace, str(tmp_path / "artifacts"), KEY, extra)
    started = []
    try:
        for name in ("gw-a", "gw-b"):
            started.append(Gateway(shared, tmp_path, name))
            started[-1].wait_ready()
        yield started
    finally:
        close_all(started)


@pytest.fixture
def published(redis_namespace: str):
    """Counts the changes published on the platform's channel (read when called)."""
    client = redis.Redis.from_url(REDIS_URL)
    listener = client.pubsub()
    listener.subscribe(f"{redis_namespace}:metadata-changed")
    seen = []

    def count() -> int:
        while (message := listener.get_message(timeout=1.0)) is not None:
            seen.append(message["type"])
        return seen.count("message")

    yield count
    listener.close()
    client.close()


def infer(http, model: str):
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    body = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x.ravel().tolist()}]}
    return x, http.post(f"/v2/models/{model}/infer", json=body)


def test_a_change_through_one_gateway_is_seen_by_the_other_at_once(gateways, model_bytes, published):
    a, b = gateways
    with a.client() as on_a, b.client() as on_b:
        # A revoked key.
        created = on_a.post("/v1/keys", json={"name": "second"})
        assert created.status_code == 201, created.text
        second = {"Authorization": f"Bearer {created.json()['key']}"}
        assert on_b.get("/v1/models", headers=second).status_code == 200  # now in B's cache
        assert on_a.delete(f"/v1/keys/{created.json()['id']}").status_code == 200
        refused = on_b.get("/v1/models", headers=second)
        assert refused.status_code == 401 and refused.json() == {"error": "invalid or revoked API key"}
        assert published() == 1
        assert on_a.delete(f"/v1/keys/{created.json()['id']}").status_code == 409  # refused: nothing to tell
        assert published() == 1

        # A suspended, then resumed tenant.
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        opened = on_a.post("/v1/admin/tenants", json={"name": "other"}, headers=admin)
        assert opened.status_code == 201, opened.text
        tenant_id, other = opened.json()["id"], {"Authorization": f"Bearer {opened.json()['key']}"}
        assert on_b.get("/v1/models", headers=other).status_code == 200
        assert on_a.post(f"/v1/admin/tenants/{tenant_id}/suspend", headers=admin).status_code == 200
        assert on_b.get("/v1/models", headers=other).status_code == 403
        assert on_a.post(f"/v1/admin/tenants/{tenant_id}/resume", headers=admin).status_code == 200
        assert on_b.get("/v1/models", headers=other).status_code == 200

        # A deleted deployment: B must not queue requests for it (no worker would ever take them).
        deployment = deploy(a, "tiny", model_bytes, replicas=1)
        x, answered = infer(on_b, "tiny")  # B caches the ready deployment
        assert answered.status_code == 200, answered.text
        expected = lm.run(tiny_graph(), {"x": x})["probs"]
        np.testing.assert_allclose(answered.json()["outputs"][0]["data"], expected.ravel(), rtol=1e-5, atol=1e-6)
        assert on_a.delete(f"/v1/deployments/{deployment['id']}").status_code == 204
        _, refused = infer(on_b, "tiny")
        assert refused.status_code in (400, 404) and "error" in refused.json(), refused.text
    assert published() == 4  # the revoke, the suspension, the resumption, the deletion
