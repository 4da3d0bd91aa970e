"""`/v1/admin/tenants` through a real server on SQLite and PostgreSQL: an operator creates a tenant whose key
works at once, lists and reads tenants, sets quotas; only the admin token opens it, never a tenant's key; unset,
the admin API says it is disabled."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from luminal.store.settings import Settings
from luminal.store.tenants import hash_key
from tests.gateway.conftest import BOOTSTRAP_KEY, upload
from tests.gateway.tenancy import ADMIN_TOKEN, admin, new_tenant, settings_with_admin


@pytest.fixture
def settings(tmp_path, database_url, request):
    """With the admin token (a test parametrizes `settings` with None to leave it unset)."""
    return settings_with_admin(tmp_path, database_url, getattr(request, "param", ADMIN_TOKEN))


def test_a_tenant_created_by_the_admin_api_works_at_once(server, model_bytes):
    created, beta = new_tenant(server, "beta", max_deployments=3, max_requests_per_second=50)
    assert created["key"].startswith("lm_") and created["active_keys"] == 1 and created["deployments"] == 0
    assert created["quotas"] == {"max_deployments": 3, "max_replicas": None, "max_requests_per_second": 50.0}
    assert created["suspended_at"] is None
    assert beta.get("/v1/models").json() == []
    assert upload(beta, "tiny", model_bytes).status_code == 201
    assert [k["prefix"] for k in beta.get("/v1/keys").json()] == [created["key"][:7]]

    listed = admin(server).get("/v1/admin/tenants")
    assert listed.status_code == 200 and [t["name"] for t in listed.json()] == ["default", "beta"]
    assert created["key"] not in listed.text and hash_key(created["key"]) not in listed.text
    one = admin(server).get(f"/v1/admin/tenants/{created['id']}").json()
    assert {k: v for k, v in created.items() if k != "key"} == one


def test_quotas_are_set_lifted_and_checked(server):
    created, _ = new_tenant(server, "beta")
    path = f"/v1/admin/tenants/{created['id']}"
    r = admin(server).patch(path, json={"max_replicas": 4, "max_requests_per_second": 0.5})
    assert r.status_code == 200, r.text
    assert r.json()["quotas"] == {"max_deployments": None, "max_replicas": 4, "max_requests_per_second": 0.5}
    r = admin(server).patch(path, json={"max_replicas": None})  # null lifts a quota; the others stay
    assert r.json()["quotas"] == {"max_deployments": None, "max_replicas": None, "max_requests_per_second": 0.5}
    for body, message in [
        ({}, "give at least one of"),
        ({"max_gpus": 1}, "max_gpus: Extra inputs are not permitted"),
        ({"max_replicas": -1}, "max_replicas: Input should be greater than or equal to 0"),
        ({"max_requests_per_second": 0}, "max_requests_per_second: Input should be greater than 0"),
        ({"max_deployments": 10**9}, "max_deployments: Input should be less than or equal to 100000"),
    ]:
        r = admin(server).patch(path, json=body)
        assert r.status_code == 422 and message in r.json()["error"], (body, r.text)
    assert admin(server).patch("/v1/admin/tenants/999", json={"max_replicas": 1}).status_code == 404


def test_bad_tenants_are_refused(server):
    new_tenant(server, "beta")
    for body, status, message in [
        ({"name": "beta"}, 409, "a tenant named 'beta' already exists"),
        ({"name": "has space"}, 422, "name: String should match pattern"),
        ({"name": "x" * 129}, 422, "name: String should match pattern"),
        ({"name": "gamma", "max_replicas": "many"}, 422, "max_replicas: Input should be a valid integer"),
        ({}, 422, "name: Field required"),
    ]:
        r = admin(server).post("/v1/admin/tenants", json=body)
        assert r.status_code == status and message in r.json()["error"], (body, r.text)
    assert [t["name"] for t in admin(server).get("/v1/admin/tenants").json()] == ["default", "beta"]


@pytest.mark.parametrize("method,path", [("GET", "/v1/admin/tenants"), ("POST", "/v1/admin/tenants/1/suspend")])
def test_only_the_admin_token_opens_the_admin_api(server, method, path):
    _, beta = new_tenant(server, "beta")
    for client, status, message in [
        (server.client(key=None), 401, "missing Authorization header (expected 'Bearer <admin token>')"),
        (server.client(key="not-the-admin-token-at-all"), 401, "wrong admin token"),
        (server.client(key=ADMIN_TOKEN[:-1]), 401, "wrong admin token"),
        (server.client(key=BOOTSTRAP_KEY), 403, "a tenant's API key cannot call the admin API"),
        (beta, 403, "a tenant's API key cannot call the admin API"),
    ]:
        r = client.request(method, path)
        assert r.status_code == status and message in r.json()["error"], r.text
    assert server.client().get("/v1/models").status_code == 200  # the default tenant was not suspended
    # ... and the admin token is no tenant key.
    assert admin(server).get("/v1/models").json() == {"error": "invalid or revoked API key"}


@pytest.mark.parametrize("settings", [None], indirect=True)
def test_without_a_token_the_admin_api_is_disabled(server):
    for key in (ADMIN_TOKEN, BOOTSTRAP_KEY, None):
        r = server.client(key=key).get("/v1/admin/tenants")
        assert r.status_code == 404 and "the admin API is disabled" in r.json()["error"], r.text


def test_an_admin_token_is_at_least_16_characters(tmp_path):
    with pytest.raises(ValidationError, match="admin_token"):
        Settings(data_dir=tmp_path, admin_token="short-token")
