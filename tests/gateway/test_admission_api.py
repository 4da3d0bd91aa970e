"""Admission control and deadlines over HTTP: a full queue answers 429 with Retry-After at once, and a request
whose timeout passes before it could start is answered 504 and never executed (nothing billed)."""

from __future__ import annotations

import threading
import time

import pytest

from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    return Settings(data_dir=tmp_path / "data", database_url=database_url, bootstrap_key=BOOTSTRAP_KEY,
                    max_queue_depth=1, compile_runner=COMPILE_RUNNER)  # fmt: skip


def infer_body(timeout_us: int | None = None) -> dict:
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    if timeout_us is not None:
        body["parameters"] = {"timeout": timeout_us}
    return body


def test_a_full_queue_is_429_and_an_expired_request_504_never_executed(server, model_bytes):
    http = server.client()
    upload(http, "tiny", model_bytes)
    deploy_and_wait(http, "tiny")
    assert http.post("/v2/models/tiny/infer", json=infer_body()).status_code == 200
    server.platform.provisioner.close()  # no worker takes anything from here on
    answers = {}
    waiting = threading.Thread(
        target=lambda: answers.setdefault("first", server.client().post("/v2/models/tiny/infer",
                                                                          json=infer_body(timeout_us=1_000_000)))
    )  # fmt: skip
    started = time.monotonic()
    waiting.start()
    while server.platform.queue.depth(1) < 1:
        assert time.monotonic() - started < 10, "the first request never reached the queue"
        time.sleep(0.01)
    refused = http.post("/v2/models/tiny/infer", json=infer_body())
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "limit" in refused.json()["error"]
    waiting.join(30)
    first = answers["first"]
    assert first.status_code == 504 and "timeout passed before execution" in first.json()["error"]
    assert 0.9 < time.monotonic() - started < 10
    records = http.get("/v1/usage/records").json()
    assert sum(r["batch_size"] for r in records) == 1  # only the request served before the workers stopped
