"""`/metrics` against a real server: Triton's counters after real infers, batches counted once, failures by
reason, the pending gauge while a request waits, and the optional bearer token. Metrics keep no state in the
metadata store, so these run on SQLite only."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import anyio.to_thread
import numpy as np
import pytest
from fastapi.testclient import TestClient

from luminal.gateway.app import create_app
from luminal.scheduler.queues.base import QueueFull
from luminal.scheduler.work import EXPIRED, FAILED, InferenceResult
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, deploy_and_wait, upload

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'meta.db'}"


@pytest.fixture
def deployed(server, model_bytes):
    c = server.client()
    assert upload(c, "tiny", model_bytes).status_code == 201
    deployment = deploy_and_wait(c, "tiny")
    assert deployment["status"] == "ready"
    server.deployment_id = str(deployment["id"])
    return server


def scrape(server) -> tuple[str, list[tuple[str, dict[str, str], float]]]:
    """The raw text and its samples, parsed by hand so the exact names on the wire are what is checked."""
    r = server.client(key=None).get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = []
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name, labels, value = _SAMPLE.match(line).groups()
            samples.append((name, dict(_LABEL.findall(labels or "")), float(value)))
    return r.text, samples


def value(samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when there is none)."""
    return sum(v for n, lab, v in samples if n == name and labels.items() <= lab.items())


def infer(server, rows: int, priority: int = 0, cols: int = 4):
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
    if priority:
        body["parameters"] = {"priority": priority}
    return server.client().post("/v2/models/tiny/infer", json=body)


def test_counters_equal_the_number_of_infers(deployed):
    n = 5
    for rows in range(1, n + 1):
        assert infer(deployed, rows).status_code == 200
    text, samples = scrape(deployed)
    labels = {"model": "tiny", "version": "1", "deployment": deployed.deployment_id}
    assert value(samples, "nv_inference_request_success", **labels) == n
    assert value(samples, "nv_inference_count", **labels) == n
    assert value(samples, "nv_inference_exec_count", **labels) == n  # the direct backend runs each alone
    assert value(samples, "luminal_inference_request_latency_seconds_count", **labels) == n
    assert value(samples, "nv_inference_request_failure") == 0
    assert value(samples, "nv_inference_pending_request_count", **labels) == 0
    compute = value(samples, "nv_inference_compute_infer_duration_us", **labels)
    request = value(samples, "nv_inference_request_duration_us", **labels)
    assert 0 < compute <= request
    # Triton's names exactly: no OpenMetrics `_total` or `_created` series.
    assert "# TYPE nv_inference_request_success counter" in text
    assert "_total" not in text and "_created" not in text


class ScriptedBackend:
    """Wraps the real backend: reports answers as batches of `batch` requests (the first of each leads) with
    known durations, and fails requests on cue through their priority (1: queue full, 2: expired, 3: failed)."""

    def __init__(self, real, batch: int = 3):
        self.real, self.batch, self.executed = real, batch, 0
        self.release: threading.Event | None = None

    async def infer(self, deployment, request) -> InferenceResult:
        if self.release is not None:
            await anyio.to_thread.run_sync(self.release.wait, 30)
        if request.priority == 1:
            raise QueueFull(deployment.deployment_id, 4, 1.0)
        if request.priority == 2:
            return InferenceResult(request.id, EXPIRED, error="the request's timeout passed before it ran")
        if request.priority == 3:
            return InferenceResult(request.id, FAILED, error="the worker died")
        result = await self.real.infer(deployment, request)
        if result.ok:
            result.batch_leader = self.executed % self.batch == 0
            result.batch_size, result.queue_seconds, result.compute_seconds = self.batch, 0.002, 0.004
            self.executed += 1
        return result


def test_exec_count_counts_each_batch_once(deployed):
    deployed.platform.backend = ScriptedBackend(deployed.platform.backend, batch=3)
    for rows in range(1, 8):
        assert infer(deployed, rows).status_code == 200
    _, samples = scrape(deployed)
    assert value(samples, "nv_inference_count", model="tiny") == 7
    assert value(samples, "nv_inference_exec_count", model="tiny") == 3  # requests 1, 4 and 7 led a batch
    assert value(samples, "nv_inference_queue_duration_us", model="tiny") == pytest.approx(7 * 2000)
    assert value(samples, "nv_inference_compute_infer_duration_us", model="tiny") == pytest.approx(7 * 4000)


def test_failures_are_counted_by_reason(deployed):
    deployed.platform.backend = ScriptedBackend(deployed.platform.backend)
    assert infer(deployed, 2, priority=1).status_code != 200  # the lead maps QueueFull to 429
    assert infer(deployed, 2, priority=2).status_code == 504
    assert infer(deployed, 2, priority=3).status_code == 500
    assert infer(deployed, 65).status_code == 400  # the runtime refuses: batch is at most 64
    assert infer(deployed, 2, cols=5).status_code == 400
    bad_json = deployed.client().post("/v2/models/tiny/infer", content=b"{")
    assert bad_json.status_code == 400  # the codec refuses before any backend sees it
    assert deployed.client().post("/v2/models/nope/infer", content=b"{}").status_code == 404
    _, samples = scrape(deployed)
    failures = {lab["reason"]: v for n, lab, v in samples if n == "nv_inference_request_failure"}
    assert failures == {"rejected": 1, "expired": 1, "failed": 1, "invalid": 3}
    assert value(samples, "nv_inference_request_success") == 0
    assert not [lab for n, lab, _ in samples if lab.get("model") == "nope"]  # unknown models get no series


def test_pending_gauge_counts_requests_waiting_on_the_backend(deployed):
    backend = ScriptedBackend(deployed.platform.backend)
    backend.release = threading.Event()
    deployed.platform.backend = backend
    caller = threading.Thread(target=infer, args=(deployed, 3))
    caller.start()
    try:
        deadline = time.monotonic() + 10
        while value(scrape(deployed)[1], "nv_inference_pending_request_count", model="tiny") != 1:
            assert time.monotonic() < deadline, "the waiting request never showed as pending"
            time.sleep(0.02)
    finally:
        backend.release.set()
        caller.join(timeout=30)
    assert value(scrape(deployed)[1], "nv_inference_pending_request_count", model="tiny") == 0


def test_metrics_token_is_required_when_set(tmp_path: Path):
    token = "metrics-token-0123456789"
    settings = Settings(data_dir=tmp_path / "data", bootstrap_key=BOOTSTRAP_KEY, metrics_token=token)
    with TestClient(create_app(settings)) as client:
        missing = client.get("/metrics")
        assert missing.status_code == 401 and "Bearer <metrics token>" in missing.json()["error"]
        assert missing.headers["www-authenticate"].startswith("Bearer")
        for header in (f"Bearer {token}x", f"Bearer {BOOTSTRAP_KEY}", f"Basic {token}", "Bearer "):
            r = client.get("/metrics", headers={"Authorization": header})
            assert r.status_code == 401, header
        ok = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/plain; version=0.0.4")


def test_metrics_are_open_without_a_token_and_apps_do_not_share_them(server):
    assert server.client(key=None).get("/metrics").status_code == 200
    other = create_app(Settings(data_dir=server.platform.settings.data_dir / "other"))
    with TestClient(other) as client:  # a second app in one process: its own registry, no name clash
        assert client.get("/metrics").status_code == 200
        assert other.state.platform.metrics.registry is not server.platform.metrics.registry
