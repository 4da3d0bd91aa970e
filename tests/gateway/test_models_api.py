"""`/v1/models` through a real server on SQLite and PostgreSQL: uploads, versions, deduplication, deletion,
and every bad upload answered with a 4xx naming the problem and nothing stored."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from luminal.graph_file import graph_to_bytes
from luminal.store.tenants import create_tenant
from tests.gateway.conftest import tiny_graph, upload


def stored_files(server) -> list[Path]:
    data_dir = server.platform.settings.data_dir
    return [p for sub in ("artifacts", "spool") for p in (data_dir / sub).rglob("*") if p.is_file()]


def assert_nothing_stored(server, client) -> None:
    assert client.get("/v1/models").json() == []
    assert stored_files(server) == []


def test_upload_versions_dedup_list_get_delete(server, model_bytes):
    c = server.client()
    first = upload(c, "tiny", model_bytes)
    assert first.status_code == 201, first.text
    assert first.json()["version"] == 1 and first.json()["inputs"] == [
        {"name": "x", "datatype": "FP32", "shape": [-1, 4]}
    ]
    same = upload(c, "tiny", model_bytes)
    assert same.status_code == 200 and same.json()["created"] is False and same.json()["version"] == 1
    second = upload(c, "tiny", graph_to_bytes(tiny_graph(features=5)))
    assert second.status_code == 201 and second.json()["version"] == 2
    assert [v["version"] for v in c.get("/v1/models/tiny").json()["versions"]] == [1, 2]
    assert [m["name"] for m in c.get("/v1/models").json()] == ["tiny"]
    assert len(stored_files(server)) == 2  # two distinct files, the duplicate stored once
    assert c.delete("/v1/models/tiny").status_code == 204
    assert c.get("/v1/models/tiny").status_code == 404
    assert_nothing_stored(server, c)


def _corrupt(model_bytes: bytes) -> dict[str, bytes]:
    entries = {}
    with zipfile.ZipFile(io.BytesIO(model_bytes)) as zf:
        entries = {name: zf.read(name) for name in zf.namelist()}
    tampered = io.BytesIO()
    with zipfile.ZipFile(tampered, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data.replace(b'"probs"', b'"probz"') if name == "graph.json" else data)
    return {
        "not a zip": b"hello, I am not a graph",
        "truncated": model_bytes[: len(model_bytes) // 2],
        "tampered graph": tampered.getvalue(),
    }


@pytest.mark.parametrize("case", ["not a zip", "truncated", "tampered graph"])
def test_malformed_graph_is_400_and_nothing_is_stored(server, model_bytes, case):
    c = server.client()
    r = upload(c, "bad", _corrupt(model_bytes)[case])
    assert r.status_code == 400 and r.json()["error"].startswith("invalid .lgraph file: "), r.text
    assert_nothing_stored(server, c)


def test_oversized_upload_is_413_whether_declared_or_streamed(server):
    c = server.client()
    limit = server.platform.settings.max_upload_bytes
    r = upload(c, "big", b"\0" * (limit + 1))
    assert r.status_code == 413 and "over the limit" in r.json()["error"]

    def chunks():  # no Content-Length: the cap must hold while streaming
        for _ in range(limit // 65536 + 2):
            yield b"\0" * 65536

    r = c.post("/v1/models", params={"name": "big"}, content=chunks())
    assert r.status_code == 413 and "exceeds the limit" in r.json()["error"]
    assert_nothing_stored(server, c)


def test_bad_names_empty_body_and_keys(server, model_bytes):
    c = server.client()
    assert upload(c, "../etc", model_bytes).status_code == 422
    r = upload(c, "empty", b"")
    assert r.status_code == 400 and "empty" in r.json()["error"]
    missing = server.client(key=None).get("/v1/models")
    assert missing.status_code == 401 and "missing Authorization" in missing.json()["error"]
    wrong = server.client(key="lm_not-a-key").post("/v1/models", params={"name": "m"}, content=model_bytes)
    assert wrong.status_code == 401 and "invalid" in wrong.json()["error"]
    assert_nothing_stored(server, c)


def test_another_tenants_model_is_404(server, model_bytes):
    with server.platform.db.session() as s:
        _, other_key = create_tenant(s, "other")
    assert upload(server.client(), "mine", model_bytes).status_code == 201
    other = server.client(key=other_key)
    assert other.get("/v1/models").json() == []
    for r in (other.get("/v1/models/mine"), other.delete("/v1/models/mine")):
        assert r.status_code == 404 and r.json() == {"error": "model 'mine' not found"}
    # The other tenant may use the same name for its own model, and deleting it leaves ours and the shared file.
    assert upload(other, "mine", model_bytes).status_code == 201
    assert other.delete("/v1/models/mine").status_code == 204
    assert server.client().get("/v1/models/mine").status_code == 200 and len(stored_files(server)) == 1
