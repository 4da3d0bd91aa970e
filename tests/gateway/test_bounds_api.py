"""Bounded strings at the API: over-long names, versions and manifest fields are refused with a 4xx that names
the field and its limit, before anything is stored."""

from __future__ import annotations

import io
import json
import zipfile

from tests.gateway.conftest import upload

LONG_NAME = "m" * 129


def with_long_luminal_version(model_bytes: bytes) -> bytes:
    """The model file with a 100 KB luminal_version (the manifest's digests cover only the other entries)."""
    with zipfile.ZipFile(io.BytesIO(model_bytes)) as zf:
        parts = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(parts["manifest.json"])
    manifest["luminal_version"] = "1" * 100_000
    parts["manifest.json"] = json.dumps(manifest).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    return out.getvalue()


def test_a_manifest_with_a_long_version_is_refused_and_not_stored(server, model_bytes):
    c = server.client()
    r = upload(c, "tiny", with_long_luminal_version(model_bytes))
    assert r.status_code == 400, r.text
    assert "luminal_version is 100000 characters, over the limit of 64" in r.json()["error"]
    assert c.get("/v1/models").json() == []


def test_long_names_and_versions_are_refused_with_the_limit(server):
    c = server.client()
    for answer in (
        c.get(f"/v2/models/{LONG_NAME}"),
        c.post(f"/v2/models/{LONG_NAME}/infer", json={"inputs": []}),
        c.get(f"/v1/models/{LONG_NAME}"),
        c.delete(f"/v1/models/{LONG_NAME}"),
    ):
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"] == "path.name: String should have at most 128 characters"
    refusals = [
        (c.post("/v1/models", params={"name": LONG_NAME}, content=b"x"), "name"),
        (c.post("/v1/deployments", json={"model": LONG_NAME}), "model"),
        (c.post("/v1/deployments", json={"model": "tiny", "version": 10**10}), "version"),
        (c.post("/v1/deployments", json={"model": "tiny", "gpu_type": "g" * 33}), "gpu_type"),
        (c.post("/v1/keys", json={"name": "k" * 129}), "name"),
        (c.post("/v1/predictions", json={"model": LONG_NAME, "inputs": [{}]}), "model"),
    ]
    for answer, field in refusals:
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"].startswith(f"{field}: ") or f".{field}: " in answer.json()["error"], answer.text
