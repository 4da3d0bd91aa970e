"""`/v1/deployments` on SQLite and PostgreSQL: a deployment compiles to `ready`, or to `failed` with the
compiler's message; bad requests are 4xx with nothing stored."""

from __future__ import annotations

import pytest

import luminal.scheduler.compile_jobs as compile_jobs
from luminal.store.settings import Settings
from luminal.store.tenants import create_tenant
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload


def test_deploy_compiles_to_ready_then_delete(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    d = deploy_and_wait(c, "tiny", gpu_type="cpu", max_batch_size=16, max_queue_delay_ms=3, max_replicas=2)
    assert d["status"] == "ready" and d["error"] is None, d
    assert (d["gpu_type"], d["target"], d["max_batch_size"], d["max_queue_delay_ms"]) == ("cpu", "cpu", 16, 3)
    assert d["endpoint"] == "/v2/models/tiny/versions/1/infer"
    assert [x["id"] for x in c.get("/v1/deployments").json()] == [d["id"]]
    again = c.post("/v1/deployments", json={"model": "tiny"})
    assert again.status_code == 409 and "already deployed" in again.json()["error"]
    program_files = len(list(server.platform.settings.artifacts_dir.rglob("*")))
    assert c.delete(f"/v1/deployments/{d['id']}").status_code == 204
    assert c.get(f"/v1/deployments/{d['id']}").status_code == 404
    assert len(list(server.platform.settings.artifacts_dir.rglob("*"))) == program_files - 1  # the program went
    assert c.get("/v2/models/tiny").status_code == 404


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    # Compile jobs in this process, so a test can replace the compiler; the process runner is the default and
    # is what every other server test uses.
    return Settings(data_dir=tmp_path / "data", database_url=database_url, bootstrap_key=BOOTSTRAP_KEY,
                    max_upload_bytes=2**20, compile_runner="thread")  # fmt: skip


def test_compiler_error_is_the_deployments_error(server, model_bytes, monkeypatch):
    def refuse(graph, target):
        raise NotImplementedError(f"no {target} kernel for this graph")

    monkeypatch.setattr(compile_jobs.lm, "compile", refuse)
    c = server.client()
    upload(c, "tiny", model_bytes)
    d = deploy_and_wait(c, "tiny")
    assert d["status"] == "failed" and d["error"] == "NotImplementedError: no cpu kernel for this graph"
    r = c.get("/v2/models/tiny/ready")
    assert r.status_code == 400 and "failed to compile: NotImplementedError" in r.json()["error"]


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"model": "nope"}, 404, "model 'nope' not found"),
        ({"model": "tiny", "version": 9}, 404, "no version 9"),
        ({"model": "tiny", "gpu_type": "tpu"}, 400, "unknown gpu_type 'tpu'"),
        ({"model": "tiny", "max_batch_size": 0}, 422, "max_batch_size"),
        ({"model": "tiny", "min_replicas": 3, "max_replicas": 2}, 422, "exceeds max_replicas"),
        ({"model": "tiny", "replicas": 3}, 422, "replicas"),
        ({"model": "tiny", "prefill_chunk": 0}, 422, "prefill_chunk"),
        ({"model": "tiny", "max_waiting": -1}, 422, "max_waiting"),
        ({"model": "tiny", "max_waiting": "many"}, 422, "max_waiting"),
        ({"model": "tiny", "pad": "x" * 100_000}, 413, "over the limit of 65536"),
        ("not an object", 422, "Input should be an object"),
        (b"{", 422, "Invalid JSON"),
    ],
)
def test_bad_deployments(server, model_bytes, body, status, message):
    c = server.client()
    upload(c, "tiny", model_bytes)
    r = c.post("/v1/deployments", **({"content": body} if isinstance(body, bytes) else {"json": body}))
    assert r.status_code == status and message in r.json()["error"], r.text
    assert c.get("/v1/deployments").json() == []


def test_body_without_content_type_and_other_tenant(server, model_bytes):
    c = server.client()
    upload(c, "tiny", model_bytes)
    with server.platform.db.session() as s:
        _, other_key = create_tenant(s, "other")
    other = server.client(key=other_key)
    r = other.post("/v1/deployments", content=b'{"model": "tiny"}')
    assert r.status_code == 404 and r.json()["error"] == "model 'tiny' not found"
    r = c.post("/v1/deployments", content=b'{"model": "tiny"}')  # no Content-Type header at all
    assert r.status_code == 202, r.text
    assert other.get(f"/v1/deployments/{r.json()['id']}").status_code == 404
    assert other.delete(f"/v1/deployments/{r.json()['id']}").status_code == 404
    server.platform.compiles.drain(timeout=120)
