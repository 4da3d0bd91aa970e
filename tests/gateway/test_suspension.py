"""Suspending a tenant through the admin API, on SQLite and PostgreSQL: its keys are refused with a 403 naming
the suspension, what it had already sent still finishes, its deployments scale to zero; resumed, it works and
scales again. Other tenants notice nothing."""

from __future__ import annotations

import time

import pytest

from luminal.store.tables import Prediction
from tests.gateway.conftest import deploy_and_wait, upload
from tests.gateway.tenancy import admin, new_tenant, settings_with_admin, wait_for_replicas

BODY = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}


@pytest.fixture
def settings(tmp_path, database_url):
    return settings_with_admin(tmp_path, database_url)


def prediction_status(server, prediction_id: str) -> str:
    with server.platform.db.session() as session:
        return session.get(Prediction, prediction_id).status


def wait_for_prediction(server, prediction_id: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while (status := prediction_status(server, prediction_id)) in ("queued", "running"):
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    return status


def test_a_suspended_tenant_is_refused_drains_to_zero_and_resumes(server, model_bytes):
    tenant, beta = new_tenant(server, "beta")
    upload(beta, "tiny", model_bytes)
    deployment = deploy_and_wait(beta, "tiny", min_replicas=1)
    wait_for_replicas(server, deployment["id"], 1)
    assert beta.post("/v2/models/tiny/infer", json=BODY).status_code == 200
    sent = beta.post("/v2/models/tiny/infer", json=BODY, headers={"Prefer": "respond-async"})
    assert sent.status_code == 202, sent.text

    suspended = admin(server).post(f"/v1/admin/tenants/{tenant['id']}/suspend", json={"reason": "unpaid invoice"})
    assert suspended.status_code == 200, suspended.text
    assert suspended.json()["suspended_at"] and suspended.json()["suspension_reason"] == "unpaid invoice"
    for method, path in [("GET", "/v1/models"), ("POST", "/v2/models/tiny/infer"), ("GET", sent.json()["url"])]:
        r = beta.request(method, path, json=BODY if method == "POST" else None)
        assert r.status_code == 403, r.text
        assert "tenant 'beta' is suspended since" in r.json()["error"] and "(unpaid invoice)" in r.json()["error"]
    assert server.client().get("/v1/models").status_code == 200  # the default tenant is untouched

    assert wait_for_prediction(server, sent.json()["id"]) == "succeeded"  # sent before: it still ran
    wait_for_replicas(server, deployment["id"], 0)  # min_replicas 1, yet drained to zero
    again = admin(server).post(f"/v1/admin/tenants/{tenant['id']}/suspend")
    assert again.status_code == 409 and "already suspended" in again.json()["error"]

    resumed = admin(server).post(f"/v1/admin/tenants/{tenant['id']}/resume")
    assert resumed.status_code == 200 and resumed.json()["suspended_at"] is None, resumed.text
    assert beta.get(sent.json()["url"]).json()["status"] == "succeeded"
    wait_for_replicas(server, deployment["id"], 1)  # its warm replica is back
    assert beta.post("/v2/models/tiny/infer", json=BODY).status_code == 200
    again = admin(server).post(f"/v1/admin/tenants/{tenant['id']}/resume")
    assert again.status_code == 409 and "is not suspended" in again.json()["error"]


def test_suspending_checks_its_target_and_reason(server):
    tenant, _ = new_tenant(server, "beta")
    assert admin(server).post("/v1/admin/tenants/999/suspend").json() == {"error": "tenant 999 not found"}
    r = admin(server).post(f"/v1/admin/tenants/{tenant['id']}/suspend", json={"reason": "a\x1b[2J"})
    assert r.status_code == 422 and "reason: String should match pattern" in r.json()["error"]
    r = admin(server).post(f"/v1/admin/tenants/{tenant['id']}/suspend", json={"reason": "x" * 257})
    assert r.status_code == 422 and "reason: String should have at most 256 characters" in r.json()["error"]
    assert admin(server).get(f"/v1/admin/tenants/{tenant['id']}").json()["suspended_at"] is None
