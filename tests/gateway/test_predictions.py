"""Asynchronous predictions against a real server on SQLite and PostgreSQL: `Prefer: respond-async` and
`/v1/predictions` answer 202, the poll gives what a synchronous infer gives, failures carry the message, the
webhook arrives signed (both schemes) for the events the prediction chose, tenants are isolated, and a restart
fails what it cut off. The webhook receivers listen on loopback, which these tests allow explicitly (as local
development does); tests/gateway/test_webhook_targets.py shows such targets refused without the setting."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from luminal.gateway import predictions as predictions_module
from luminal.gateway.app import create_app, start_platform, stop_platform
from luminal.gateway.webhook_signatures import SIGNATURE_HEADER, standard_webhooks_secret, verify_signature
from luminal.gateway.webhooks import deliver
from luminal.store import predictions as prediction_store
from luminal.store.tables import Prediction, Tenant
from luminal.store.tenants import create_tenant
from tests.gateway.conftest import BOOTSTRAP_KEY, upload
from tests.gateway.webhook_receiver import Receiver

ASYNC = {"Prefer": "respond-async"}


@pytest.fixture(autouse=True)
def allow_loopback_webhooks(monkeypatch):
    """The receivers below listen on 127.0.0.1: allowed explicitly, as for local development (autouse fixtures
    run first, so every Settings these tests build reads it)."""
    monkeypatch.setenv("LUMINAL_WEBHOOK_ALLOW_PRIVATE", "true")


def tensor(x: np.ndarray) -> dict:
    return {"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def wait_finished(client, prediction_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(f"/v1/predictions/{prediction_id}")
        assert r.status_code == 200, r.text
        if r.json()["status"] in ("succeeded", "failed"):
            return r.json()
        assert time.monotonic() < deadline, f"prediction {prediction_id} did not finish: {r.json()}"
        time.sleep(0.05)


def test_respond_async_polls_to_the_synchronous_answer(deployed):
    c = deployed.client()
    body = {"inputs": [tensor(rows(3))], "id": "req-7"}
    sync = c.post("/v2/models/tiny/infer", json=body)
    accepted = c.post("/v2/models/tiny/versions/1/infer", json=body, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    ticket = accepted.json()
    assert ticket["status"] == "queued" and ticket["url"] == f"/v1/predictions/{ticket['id']}"
    assert accepted.headers["location"] == ticket["url"]
    assert accepted.headers["preference-applied"] == "respond-async"
    done = wait_finished(c, ticket["id"])
    assert done["status"] == "succeeded" and done["error"] is None, done
    assert done["output"] == sync.json()
    assert (done["model"], done["version"]) == ("tiny", 1)
    assert done["created_at"] <= done["started_at"] <= done["completed_at"]
    assert done["billed_seconds"] > 0 and done["webhook_status"] is None


def test_binary_outputs_are_stored_as_json_data(deployed):
    x = rows(2, seed=1)
    header = json.dumps(
        {
            "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": {"binary_data_size": 32}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    c = deployed.client()
    r = c.post(
        "/v2/models/tiny/infer",
        content=header + x.tobytes(),
        headers={"Prefer": "wait=5, respond-async", "Inference-Header-Content-Length": str(len(header))},
    )
    assert r.status_code == 202, r.text
    output = wait_finished(c, r.json()["id"])["output"]["outputs"][0]
    sync = c.post("/v2/models/tiny/infer", json={"inputs": [tensor(x)]}).json()["outputs"][0]
    assert "parameters" not in output and output["data"] == sync["data"]


def test_v1_predictions_report_a_failing_input_with_its_message(deployed):
    c = deployed.client()
    r = c.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(65))]})
    assert r.status_code == 202 and r.headers["location"] == r.json()["url"], r.text
    failed = wait_finished(c, r.json()["id"])
    assert failed["status"] == "failed" and failed["output"] is None
    assert "symbol 'batch' = 65 (from input 'x') is outside [1, 64]" in failed["error"]
    ok = c.post("/v1/predictions", json={"model": "tiny", "version": 1, "inputs": [tensor(rows(2))]})
    assert wait_finished(c, ok.json()["id"])["status"] == "succeeded"


@pytest.mark.parametrize(
    "body,status,message",
    [
        ({"model": "nope", "inputs": [tensor(rows(1))]}, 404, "model 'nope' is not deployed"),
        ({"model": "tiny", "version": 2, "inputs": [tensor(rows(1))]}, 404, "model 'tiny' version 2 is not deployed"),
        ({"model": "tiny", "inputs": [{**tensor(rows(1)), "datatype": "INT32"}]}, 400, "the model takes FP32"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "outputs": [{"name": "q"}]}, 400, "unknown output 'q'"),
        ({"model": "tiny", "inputs": []}, 422, "inputs"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "stream": True}, 422, "stream"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook": "ftp://example.com/x"}, 400, "http:// or https://"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook": "javascript:alert(1)"}, 400, "http:// or https://"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook": "/relative"}, 400, "http:// or https://"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook": "http://"}, 400, "has no host"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook": "http://a b.com/"}, 400, "whitespace"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook": "http://h:99999/"}, 400, "malformed"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook": "http://h/" + "a" * 3000}, 400, "over the limit"),
        ({"model": "tiny", "inputs": [tensor(rows(1))], "webhook_events_filter": ["start"]}, 422, "without a webhook"),
        (
            {
                "model": "tiny",
                "inputs": [tensor(rows(1))],
                "webhook": "http://127.0.0.1:9/",
                "webhook_events_filter": ["output"],
            },
            422,
            "webhook_events_filter",
        ),
        (
            {
                "model": "tiny",
                "inputs": [tensor(rows(1))],
                "webhook": "http://127.0.0.1:9/",
                "webhook_events_filter": [],
            },
            422,
            "webhook_events_filter",
        ),
    ],
)
def test_bad_prediction_requests_are_refused_at_once(deployed, body, status, message):
    r = deployed.client().post("/v1/predictions", json=body)
    assert r.status_code == status and message in r.json()["error"], r.text
    assert deployed.client().get("/v1/predictions").json()["predictions"] == []  # nothing half-created


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def webhook_outcome(client, prediction_id: str, timeout: float = 30) -> dict:
    """The prediction once its webhook deliveries are recorded (webhook_status no longer pending)."""
    deadline = time.monotonic() + timeout
    while (doc := client.get(f"/v1/predictions/{prediction_id}").json())["webhook_status"] in ("pending", None):
        assert time.monotonic() < deadline, "the webhook outcome was never recorded"
        time.sleep(0.05)
    return doc


def test_webhook_arrives_signed_and_a_tampered_body_fails_verification(deployed, receiver):
    c = deployed.client()
    r = c.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(2))], "webhook": receiver.url})
    assert r.status_code == 202, r.text
    assert receiver.arrived.wait(30), "no webhook arrived"
    headers, body = receiver.deliveries[0]
    assert headers["Content-Type"] == "application/json"
    secret = deployed.platform.predictions.webhooks.secret
    signature = headers[SIGNATURE_HEADER]
    assert verify_signature(secret, signature, body)
    tampered = body.replace(b'"succeeded"', b'"failed"')
    assert tampered != body and not verify_signature(secret, signature, tampered)
    assert not verify_signature(secret + "x", signature, body)
    assert not verify_signature(secret, signature, body, now=time.time() + 3600)  # a replay an hour later
    # The Standard Webhooks headers, checked by that standard's own library.
    standard = Webhook(standard_webhooks_secret(secret))
    assert standard.verify(body, headers) == json.loads(body)
    assert headers["webhook-id"] == f"msg_{r.json()['id']}_completed"
    with pytest.raises(WebhookVerificationError):
        standard.verify(tampered, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(standard_webhooks_secret(secret + "x")).verify(body, headers)
    pushed = json.loads(body)
    polled = wait_finished(c, r.json()["id"])
    assert pushed["status"] == "succeeded" and pushed["output"] == polled["output"]
    assert webhook_outcome(c, r.json()["id"])["webhook_status"] == "delivered"
    assert len(receiver.deliveries) == 1  # by default only "completed" is sent


def test_webhook_retries_a_failing_receiver_then_records_the_failure(deployed):
    receiver = Receiver(statuses=[503, 500, 502])
    try:
        c = deployed.client()
        r = c.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(1))], "webhook": receiver.url})
        doc = webhook_outcome(c, r.json()["id"])
        assert doc["status"] == "succeeded" and doc["webhook_status"] == "failed"
        assert len(receiver.deliveries) == 3
        assert {h["webhook-id"] for h, _ in receiver.deliveries} == {f"msg_{r.json()['id']}_completed"}  # one event
        signatures = {h[SIGNATURE_HEADER] for h, _ in receiver.deliveries}
        assert all(verify_signature(deployed.platform.predictions.webhooks.secret, s, receiver.deliveries[0][1])
                   for s in signatures)  # fmt: skip
    finally:
        receiver.close()


def test_a_prediction_chooses_its_webhook_events(deployed, receiver):
    c = deployed.client()
    body = {"model": "tiny", "inputs": [tensor(rows(2))], "webhook": receiver.url}
    both = c.post("/v1/predictions", json={**body, "webhook_events_filter": ["start", "completed"]}).json()["id"]
    assert webhook_outcome(c, both)["webhook_status"] == "delivered"
    sent = [(h["webhook-id"], json.loads(b)["status"]) for h, b in receiver.deliveries]
    assert sent == [(f"msg_{both}_start", "running"), (f"msg_{both}_completed", "succeeded")]

    start_only = c.post("/v1/predictions", json={**body, "webhook_events_filter": ["start"]}).json()["id"]
    assert webhook_outcome(c, start_only)["webhook_status"] == "delivered"
    assert wait_finished(c, start_only)["status"] == "succeeded"
    sent = [(h["webhook-id"], json.loads(b)["status"]) for h, b in receiver.deliveries[2:]]
    assert sent == [(f"msg_{start_only}_start", "running")]


def test_another_tenants_prediction_is_not_found(deployed):
    c = deployed.client()
    prediction_id = c.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(1))]}).json()["id"]
    with deployed.platform.db.session() as s:
        _, other_key = create_tenant(s, "other")
    other = deployed.client(key=other_key)
    missing = other.get(f"/v1/predictions/{prediction_id}")
    assert missing.status_code == 404 and prediction_id in missing.json()["error"]
    assert other.get("/v1/predictions").json() == {"predictions": [], "next_before": None}
    assert other.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(1))]}).status_code == 404
    assert deployed.client(key=None).get(f"/v1/predictions/{prediction_id}").status_code == 401
    assert c.get(f"/v1/predictions/{prediction_id}").status_code == 200


def test_list_pages_newest_first(deployed):
    c = deployed.client()
    ids = [c.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(1))]}).json()["id"] for _ in "abc"]
    first = c.get("/v1/predictions", params={"limit": 2}).json()
    assert [p["id"] for p in first["predictions"]] == ids[:0:-1] and first["next_before"] == ids[1]
    assert all(p["output"] is None for p in first["predictions"])  # lists stay small
    second = c.get("/v1/predictions", params={"limit": 2, "before": first["next_before"]}).json()
    assert [p["id"] for p in second["predictions"]] == ids[:1] and second["next_before"] is None
    for params in ({"limit": 0}, {"limit": 101}, {"before": "../x"}):
        assert c.get("/v1/predictions", params=params).status_code == 422, params


def test_large_outputs_go_to_the_artifact_store(deployed, monkeypatch):
    monkeypatch.setattr(predictions_module, "INLINE_OUTPUT_BYTES", 64)
    c = deployed.client()
    x = rows(4, seed=3)
    r = c.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(x)]})
    done = wait_finished(c, r.json()["id"])
    assert done["output"] == c.post("/v2/models/tiny/infer", json={"inputs": [tensor(x)]}).json()
    with deployed.platform.db.session() as s:
        row = s.get(Prediction, done["id"])
        assert row.output is None and deployed.platform.artifacts.exists(row.output_key)


def test_a_restart_fails_the_predictions_it_cut_off(settings):
    platform = start_platform(settings)
    with platform.db.session() as s:
        tenant_id = s.scalars(select(Tenant.id)).first()
        spec = prediction_store.PredictionSpec(tenant_id, None, "tiny", 1)
        queued, running, done = (prediction_store.create_prediction(s, spec).id for _ in range(3))
        prediction_store.mark_running(s, running)
        prediction_store.finish_prediction(s, done, prediction_store.Outcome(None, output="{}", billed_seconds=0.5))
    stop_platform(platform)
    platform = start_platform(settings)
    try:
        with platform.db.session() as s:
            rows_by_id = {p: s.get(Prediction, p) for p in (queued, running, done)}
            for p in (queued, running):
                assert rows_by_id[p].status == "failed" and rows_by_id[p].error == "interrupted by a restart"
                assert rows_by_id[p].completed_at is not None
            assert rows_by_id[done].status == "succeeded" and rows_by_id[done].error is None
    finally:
        stop_platform(platform)


def test_the_generated_webhook_secret_survives_a_restart(settings):
    first = start_platform(settings)
    secret = first.predictions.webhooks.secret
    stop_platform(first)
    again = start_platform(settings)
    try:
        assert again.predictions.webhooks.secret == secret and len(secret) == 64
        path = settings.data_dir / "webhook_secret"
        assert path.read_text().strip() == secret and os.stat(path).st_mode & 0o077 == 0
    finally:
        stop_platform(again)
    configured = settings.model_copy(update={"webhook_secret": "s" * 32})
    platform = start_platform(configured)
    try:
        assert platform.predictions.webhooks.secret == "s" * 32
    finally:
        stop_platform(platform)


class StuckBackend:
    """Never answers within a test's patience: a prediction that is still running when the gateway stops."""

    def __init__(self):
        self.started = threading.Event()

    async def infer(self, deployment, request):
        self.started.set()
        await asyncio.sleep(3600)


def test_a_shutdown_fails_the_predictions_still_running(settings, model_bytes, monkeypatch):
    monkeypatch.setattr(predictions_module, "SHUTDOWN_GRACE_S", 0.1)
    backend = StuckBackend()
    with TestClient(create_app(settings, backend=backend)) as client:
        client.headers["Authorization"] = f"Bearer {BOOTSTRAP_KEY}"
        assert upload(client, "tiny", model_bytes).status_code == 201
        assert client.post("/v1/deployments", json={"model": "tiny"}).status_code == 202
        client.app.state.platform.compiles.drain(timeout=120)
        r = client.post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(1))]})
        assert r.status_code == 202 and backend.started.wait(10)
    platform = start_platform(settings)  # the shutdown's mark, not the restart's, must be on it
    try:
        with platform.db.session() as s:
            row = s.get(Prediction, r.json()["id"])
            assert row.status == "failed" and row.error == predictions_module.SHUTDOWN_MESSAGE
    finally:
        stop_platform(platform)


def test_too_many_unfinished_predictions_is_429(deployed, monkeypatch):
    monkeypatch.setattr(predictions_module, "MAX_UNFINISHED", 0)
    r = deployed.client().post("/v1/predictions", json={"model": "tiny", "inputs": [tensor(rows(1))]})
    assert r.status_code == 429 and "retry shortly" in r.json()["error"]
    assert deployed.client().get("/v1/predictions").json()["predictions"] == []
    metrics = deployed.client(key=None).get("/metrics").text
    assert 'nv_inference_request_failure{deployment="1",model="tiny",reason="rejected",version="1"} 1.0' in metrics


@pytest.mark.parametrize("status,attempts", [(400, 1), (301, 1), (500, 3)])
def test_deliver_retries_only_what_may_recover(status, attempts):
    receiver = Receiver(statuses=[status] * 3)
    try:
        delivery = asyncio.run(deliver(receiver.url, b"{}", "s" * 32, allow_private=True, backoff_s=0.01))
    finally:
        receiver.close()
    assert not delivery.delivered and delivery.attempts == attempts == len(receiver.deliveries)
    assert f"HTTP {status}" in delivery.error
