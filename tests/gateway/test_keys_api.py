"""`/v1/keys` through a real server on SQLite and PostgreSQL: a new key is shown once and works at once, the
listing never holds a secret, a revoked key gets 401, other tenants' keys are 404, the last key cannot go."""

from __future__ import annotations

import pytest

from luminal.store.tenants import create_tenant, hash_key
from tests.gateway.conftest import BOOTSTRAP_KEY


def test_create_list_revoke(server):
    c = server.client()
    created = c.post("/v1/keys", json={"name": "ci runner"})
    assert created.status_code == 201, created.text
    new = created.json()
    assert new["name"] == "ci runner" and new["revoked_at"] is None
    assert new["key"].startswith("lm_") and new["prefix"] == new["key"][:7]
    fresh = server.client(key=new["key"])
    assert fresh.get("/v1/models").status_code == 200  # the new key works at once

    listed = c.get("/v1/keys").json()
    assert [k["id"] for k in listed] == sorted(k["id"] for k in listed) and new["id"] in [k["id"] for k in listed]
    text = c.get("/v1/keys").text
    for secret in (new["key"], hash_key(new["key"]), BOOTSTRAP_KEY, hash_key(BOOTSTRAP_KEY)):
        assert secret not in text
    assert all(set(k) == {"id", "name", "prefix", "created_at", "revoked_at"} for k in listed)

    revoked = fresh.delete(f"/v1/keys/{new['id']}")  # a key may revoke itself while another stays active
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None, revoked.text
    gone = fresh.get("/v1/models")
    assert gone.status_code == 401 and gone.json() == {"error": "invalid or revoked API key"}
    again = c.delete(f"/v1/keys/{new['id']}")
    assert again.status_code == 409 and "already revoked" in again.json()["error"]
    by_id = {k["id"]: k for k in c.get("/v1/keys").json()}
    assert by_id[new["id"]]["revoked_at"] is not None


def test_body_is_optional_and_checked(server):
    c = server.client()
    unnamed = c.post("/v1/keys")
    assert unnamed.status_code == 201 and unnamed.json()["name"] is None, unnamed.text
    for body, message in [
        (b'{"name": ""}', "name: String should have at least 1 character"),
        (b'{"name": "a\\u001b[2J"}', "name: String should match pattern"),
        (b'{"name": "x", "admin": true}', "admin: Extra inputs are not permitted"),
        (b'{"name": 5}', "name: Input should be a valid string"),
        (b"[1]", "Input should be an object"),
        (b"{", "Invalid JSON"),
        (b'{"name": "' + b"x" * 5000 + b'"}', "over the limit of 4096"),
    ]:
        r = c.post("/v1/keys", content=body)
        assert r.status_code in (413, 422) and message in r.json()["error"], (body[:40], r.text)
    assert len(c.get("/v1/keys").json()) == 2  # the bootstrap key and the unnamed one: nothing else was stored


def test_keys_are_tenant_scoped(server):
    with server.platform.db.session() as s:
        _, other_key = create_tenant(s, "other")
    other = server.client(key=other_key)
    mine = server.client().post("/v1/keys", json={"name": "mine"}).json()
    assert [k["name"] for k in other.get("/v1/keys").json()] == [None]  # only its own key
    r = other.delete(f"/v1/keys/{mine['id']}")
    assert r.status_code == 404 and r.json()["error"] == f"API key {mine['id']} not found"
    assert server.client(key=mine["key"]).get("/v1/keys").status_code == 200  # still active


def test_last_active_key_cannot_be_revoked(server):
    c = server.client()
    (only,) = c.get("/v1/keys").json()
    r = c.delete(f"/v1/keys/{only['id']}")
    assert r.status_code == 409 and "last active key" in r.json()["error"]
    assert c.get("/v1/keys").status_code == 200  # the tenant is not locked out
    spare = c.post("/v1/keys").json()
    assert c.delete(f"/v1/keys/{only['id']}").status_code == 200
    assert server.client(key=spare["key"]).delete(f"/v1/keys/{spare['id']}").status_code == 409


@pytest.mark.parametrize("key_id,status", [("999999", 404), ("0", 422), (str(2**31), 422), ("x", 422)])
def test_unknown_or_malformed_ids(server, key_id, status):
    r = server.client().delete(f"/v1/keys/{key_id}")
    assert r.status_code == status and r.json()["error"], r.text


def test_keys_need_a_valid_key(server):
    assert server.client(key=None).get("/v1/keys").status_code == 401
    assert server.client(key="lm_not-a-key").post("/v1/keys").status_code == 401
