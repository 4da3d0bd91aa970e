"""`PATCH /v1/deployments/{id}` on SQLite and PostgreSQL: batching and scaling settings change and are stored;
bad values, unknown fields and replica bounds out of order are 4xx naming the problem, with nothing changed."""

from __future__ import annotations

import pytest

from luminal.store.tenants import create_tenant
from tests.gateway.conftest import upload

SETTINGS = ("max_batch_size", "max_queue_delay_ms", "min_replicas", "max_replicas")


@pytest.fixture
def deployment(server, model_bytes) -> dict:
    c = server.client()
    upload(c, "tiny", model_bytes)
    created = c.post("/v1/deployments", json={"model": "tiny", "max_replicas": 2})
    assert created.status_code == 202, created.text
    yield created.json()
    server.platform.compiles.drain(timeout=120)


def settings_of(server, deployment_id: int) -> dict:
    d = server.client().get(f"/v1/deployments/{deployment_id}").json()
    return {k: d[k] for k in SETTINGS}


def test_patch_changes_only_what_is_given(server, deployment):
    c = server.client()
    r = c.patch(f"/v1/deployments/{deployment['id']}", json={"min_replicas": 1, "max_batch_size": 32})
    assert r.status_code == 200, r.text
    want = {"max_batch_size": 32, "max_queue_delay_ms": 5, "min_replicas": 1, "max_replicas": 2}
    assert {k: r.json()[k] for k in SETTINGS} == want
    assert settings_of(server, deployment["id"]) == want  # stored, not only answered
    assert r.json()["updated_at"] > deployment["updated_at"]
    r = c.patch(f"/v1/deployments/{deployment['id']}", json={"max_replicas": 8, "max_queue_delay_ms": 0})
    assert r.status_code == 200 and settings_of(server, deployment["id"]) == want | {
        "max_replicas": 8,
        "max_queue_delay_ms": 0,
    }
    r = c.patch(f"/v1/deployments/{deployment['id']}", json={"min_replicas": 0, "max_replicas": 1})
    assert r.status_code == 200 and (r.json()["min_replicas"], r.json()["max_replicas"]) == (0, 1)


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"min_replicas": 3}, 409, "min_replicas 3 would exceed max_replicas 2"),
        ({"max_replicas": 0}, 422, "max_replicas: Input should be greater than or equal to 1"),
        ({"min_replicas": 2, "max_replicas": 1}, 422, "min_replicas 2 exceeds max_replicas 1"),
        ({"min_replicas": -1}, 422, "min_replicas: Input should be greater than or equal to 0"),
        ({"max_replicas": 65}, 422, "max_replicas: Input should be less than or equal to 64"),
        ({"max_batch_size": 0}, 422, "max_batch_size: Input should be greater than or equal to 1"),
        ({"max_batch_size": 1025}, 422, "max_batch_size"),
        ({"max_queue_delay_ms": 60_001}, 422, "max_queue_delay_ms"),
        ({"max_batch_size": 2.5}, 422, "max_batch_size"),
        ({"max_batch_size": None}, 422, "['max_batch_size'] may not be null"),
        ({"replicas": 3, "gpu_type": "h100"}, 422, "replicas: Extra inputs are not permitted"),
        ({}, 422, "give at least one of"),
        ([1], 422, "Input should be an object"),
        ({"pad": "x" * 100_000}, 413, "over the limit of 65536"),
    ],
)
def test_bad_patches_change_nothing(server, deployment, body, status, message):
    before = settings_of(server, deployment["id"])
    r = server.client().patch(f"/v1/deployments/{deployment['id']}", json=body)
    assert r.status_code == status and message in r.json()["error"], r.text
    assert settings_of(server, deployment["id"]) == before


def test_gpu_type_is_named_as_unknown_field(server, deployment):
    r = server.client().patch(f"/v1/deployments/{deployment['id']}", json={"gpu_type": "h100"})
    assert r.status_code == 422 and "gpu_type: Extra inputs are not permitted" in r.json()["error"]


def test_other_tenant_and_unknown_ids_are_404(server, deployment):
    with server.platform.db.session() as s:
        _, other_key = create_tenant(s, "other")
    r = server.client(key=other_key).patch(f"/v1/deployments/{deployment['id']}", json={"max_replicas": 4})
    assert r.status_code == 404 and r.json()["error"] == f"deployment {deployment['id']} not found"
    assert server.client().patch("/v1/deployments/424242", json={"max_replicas": 4}).status_code == 404
    assert server.client().patch(f"/v1/deployments/{2**40}", json={"max_replicas": 4}).status_code == 422
    assert settings_of(server, deployment["id"])["max_replicas"] == 2
