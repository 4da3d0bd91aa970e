"""No tenant reaches another's resources, on SQLite and PostgreSQL. A second tenant, created through the admin
API, aims every route of the app at the first tenant's model, versions, deployment, prediction and key: each
read, call, change and delete is a 404 worded exactly as for something that does not exist (so nothing can be
probed), every listing and usage report shows none of it, and afterwards the first tenant's things are intact.

The routes come from the app's OpenAPI document, and the test fails when a route is in neither ROUTES nor
NOT_TENANT_ROUTES: a new route cannot be forgotten."""

from __future__ import annotations

import re

import pytest

from tests.gateway.conftest import deploy_and_wait, upload
from tests.gateway.tenancy import new_tenant, settings_with_admin

BODY = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]}
# Health, server metadata and metrics take no tenant key; the admin routes take the admin token (test_admin_api).
NOT_TENANT_ROUTES = {("GET", "/v2/health/live"), ("GET", "/v2/health/ready"), ("GET", "/v2"), ("GET", "/metrics")}
ADMIN_PREFIX = "/v1/admin/"

# Routes naming a resource (in the path, or the body's "model"): aimed at the first tenant's, answered 404.
NAMING = {
    ("GET", "/v2/models/{name}"): None,
    ("GET", "/v2/models/{name}/versions/{version}"): None,
    ("GET", "/v2/models/{name}/ready"): None,
    ("GET", "/v2/models/{name}/versions/{version}/ready"): None,
    ("POST", "/v2/models/{name}/infer"): BODY,
    ("POST", "/v2/models/{name}/versions/{version}/infer"): BODY,
    ("GET", "/v1/models/{name}"): None,
    ("DELETE", "/v1/models/{name}"): None,
    ("DELETE", "/v1/models/{name}/versions/{version}"): None,
    ("GET", "/v1/models/{name}/traffic"): None,
    ("PUT", "/v1/models/{name}/traffic"): {"split": {"1": 100}},
    ("DELETE", "/v1/models/{name}/traffic"): None,
    ("POST", "/v1/models/{name}/traffic/rollback"): None,
    ("GET", "/v1/models/{name}/traffic/history"): None,
    ("GET", "/v1/deployments/{deployment_id}"): None,
    ("PATCH", "/v1/deployments/{deployment_id}"): {"max_batch_size": 2, "min_replicas": 0},
    ("DELETE", "/v1/deployments/{deployment_id}"): None,
    ("GET", "/v1/deployments/{deployment_id}/workers"): None,
    ("GET", "/v1/dashboard/deployments/{deployment_id}/series"): None,
    ("GET", "/v1/deployments/{deployment_id}/adapters"): None,
    ("POST", "/v1/deployments/{deployment_id}/adapters"): {"name": "a1", "config": {}, "weights_base64": ""},
    ("DELETE", "/v1/deployments/{deployment_id}/adapters/{name}"): None,
    ("GET", "/v1/predictions/{prediction_id}"): None,
    ("DELETE", "/v1/keys/{key_id}"): None,
    ("POST", "/v1/deployments"): {"model": "{name}", "version": 1},
    ("POST", "/v1/predictions"): {"model": "{name}", **BODY},
    ("POST", "/openai/v1/completions"): {"model": "{name}", "prompt": "hi", "max_tokens": 2},
    ("POST", "/openai/v1/chat/completions"): {"model": "{name}", "messages": [{"role": "user", "content": "hi"}]},
    ("POST", "/openai/v1/embeddings"): {"model": "{name}", "input": "hi"},
}
# Listings and reports, with the query that aims them at the first tenant's deployment where they take one.
LISTING = {
    ("GET", "/v1/models"): None,
    ("GET", "/v1/deployments"): None,
    ("GET", "/v1/keys"): None,
    ("GET", "/v1/predictions"): None,
    ("GET", "/v1/usage"): {"deployment_id": "{deployment_id}", "since": "0"},
    ("GET", "/v1/usage/records"): {"deployment_id": "{deployment_id}"},
    ("GET", "/v1/dashboard/summary"): None,
    ("GET", "/openai/v1/models"): None,
}
# Routes that make something of the caller's own: run last, then the first tenant's things are checked intact.
CREATING = {("POST", "/v1/models"), ("POST", "/v1/keys")}


@pytest.fixture
def settings(tmp_path, database_url):
    return settings_with_admin(tmp_path, database_url)


def app_routes(server) -> set[tuple[str, str]]:
    paths = server.client().get("/openapi.json").json()["paths"]
    return {(method.upper(), path) for path, ops in paths.items() for method in ops}


def fill(template, ids: dict[str, str]):
    if isinstance(template, str):
        return template.format(**ids)
    if isinstance(template, dict):
        return {k: fill(v, ids) for k, v in template.items()}
    return template


def error_message(response) -> str:
    """The error's text: {"error": "..."} on the management and OIP routes, OpenAI's {"error": {"message"}}."""
    error = response.json()["error"]
    return error["message"] if isinstance(error, dict) else error


def worded(message: str, ids: dict[str, str]) -> str:
    """The message with the identifiers it names replaced by their kind, so two can be compared."""
    for kind in ("prediction_id", "name"):
        message = message.replace(ids[kind], f"<{kind}>")
    return re.sub(r"\b\d+\b", "<n>", message)


@pytest.fixture
def first_tenants_things(server, model_bytes) -> dict[str, str]:
    c = server.client()
    upload(c, "tiny", model_bytes)
    deployment = deploy_and_wait(c, "tiny")
    prediction = c.post("/v1/predictions", json={"model": "tiny", **BODY}).json()
    key = c.post("/v1/keys", json={"name": "mine"}).json()
    ids = {"name": "tiny", "version": "1", "deployment_id": str(deployment["id"])}
    return ids | {"prediction_id": prediction["id"], "key_id": str(key["id"]), "key": key["key"]}


def test_no_tenant_reaches_another(server, first_tenants_things):
    theirs = first_tenants_things
    nowhere = {"name": "nope", "version": "1", "deployment_id": "999999", "prediction_id": "0" * 32, "key_id": "999999"}
    tenant_routes = {r for r in app_routes(server) if r not in NOT_TENANT_ROUTES and not r[1].startswith(ADMIN_PREFIX)}
    assert tenant_routes == set(NAMING) | set(LISTING) | CREATING, "a route is missing from this test's tables"
    before = snapshot(server.client())
    _, other = new_tenant(server, "other")

    for (method, path), body in NAMING.items():
        aimed = other.request(method, fill(path, theirs), json=fill(body, theirs))
        missing = other.request(method, fill(path, nowhere), json=fill(body, nowhere))
        assert aimed.status_code == 404, (method, path, aimed.text)
        assert worded(error_message(aimed), theirs) == worded(error_message(missing), nowhere), (method, path)

    for (method, path), query in LISTING.items():
        aimed = other.request(method, path, params=fill(query, theirs))
        assert aimed.status_code == 200, (method, path, aimed.text)
        for secret in (theirs["key"], theirs["prediction_id"], '"tiny"', theirs["key"][:7]):
            assert secret not in aimed.text, (method, path, aimed.text)
    report = other.get("/v1/usage", params={"deployment_id": theirs["deployment_id"], "since": "0"}).json()
    assert report["rows"] == [] and report["totals"]["requests"] == 0
    assert other.get("/v1/usage/records", params={"deployment_id": theirs["deployment_id"]}).json() == []

    assert upload(other, "tiny", b"not a graph").status_code == 400  # its own "tiny", refused on its own
    assert other.post("/v1/keys", json={"name": "mine"}).status_code == 201
    assert snapshot(server.client()) == before  # the first tenant's things are as they were
    assert server.client(key=theirs["key"]).post("/v2/models/tiny/infer", json=BODY).status_code == 200


def snapshot(client) -> dict:
    deployments = client.get("/v1/deployments").json()
    return {
        "models": client.get("/v1/models").json(),
        "deployments": [{k: v for k, v in d.items() if k != "updated_at"} for d in deployments],
        "keys": client.get("/v1/keys").json(),
        "predictions": [p["id"] for p in client.get("/v1/predictions").json()["predictions"]],
    }
