"""The dashboard's JSON API against a real server: the series' counts and percentiles match the traffic sent,
the summary lists the deployment, its replicas, billed usage per day and the failed requests with their
messages, bad query parameters are 400s naming them, and the page's files are served. The sampler's intervals
are marked by calling `sample()` (no waiting on its clock). Its state is in memory: SQLite only."""

from __future__ import annotations

import bisect
import time
from pathlib import Path

import pytest

from luminal.gateway.dashboard.readings import quantile
from luminal.gateway.dashboard.sampler import MetricsSampler
from luminal.gateway.generation_metrics import GenerationMetrics
from luminal.gateway.metrics import LATENCY_BUCKETS, InferenceMetrics, ModelLabels
from luminal.scheduler.generation.engines import Engines
from tests.gateway.conftest import deploy_and_wait, upload

GOOD = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": [0.5] * 8}]}
BAD = {"inputs": [{"name": "x", "shape": [1, 5], "datatype": "FP32", "data": [0.5] * 5}]}  # 5 features, not 4


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'meta.db'}"


def test_quantile_interpolates_inside_the_bucket():
    counts = ((0.1, 10.0), (0.2, 30.0), (0.5, 40.0), (float("inf"), 40.0))
    assert quantile(0.25, counts) == pytest.approx(0.1)  # rank 10: the first bucket's top
    assert quantile(0.5, counts) == pytest.approx(0.15)  # rank 20: halfway through the (0.1, 0.2] bucket
    assert quantile(0.95, counts) == pytest.approx(0.2 + 0.3 * 8 / 10)
    assert quantile(0.5, ((1.0, 0.0), (float("inf"), 4.0))) == 1.0  # above every finite bound: the largest one
    assert quantile(0.5, ((1.0, 0.0), (float("inf"), 0.0))) is None


def test_sampler_keeps_a_bounded_ring_with_language_model_rates():
    metrics, clock = InferenceMetrics(), [1000.0]
    generation = GenerationMetrics(metrics.registry, Engines())
    sampler = MetricsSampler(metrics, generation, 1.0, max_points=3, clock=lambda: clock[0])
    labels = ModelLabels.of("chat", 1, 7)
    sampler.sample()
    for step in range(5):
        timer = generation.sequence(labels, arrived=0.0)
        timer.token(0.02)  # the first token after 20 ms
        timer.ended(prompt_tokens=3, completion_tokens=10 * (step + 1))
        clock[0] += 2.0
        sampler.sample()
    points = sampler.series(7, since=0)
    assert [p.at for p in points] == [1006.0, 1008.0, 1010.0]  # the oldest two dropped
    assert [p.tokens_per_s for p in points] == [15.0, 20.0, 25.0]  # 30, 40, 50 tokens in 2 s each
    assert all(p.sequences == 1 and 10 <= p.ttft_p50_ms <= 25 for p in points)
    assert points[-1].requests == 0 and points[-1].latency_p50_ms is None
    assert sampler.series(7, since=1008.0) == points[-1:]


def test_series_and_summary_follow_the_traffic(server, model_bytes):
    c = server.client()
    assert upload(c, "tiny", model_bytes).status_code == 201
    deployment = deploy_and_wait(c, "tiny")
    sampler = server.platform.dashboard_sampler
    sampler.sample()  # the interval starts here
    slowest = 0.0
    for _ in range(6):
        started = time.perf_counter()
        assert c.post("/v2/models/tiny/infer", json=GOOD).status_code == 200
        slowest = max(slowest, time.perf_counter() - started)
    refused = [c.post("/v2/models/tiny/infer", json=BAD) for _ in range(3)]
    assert {r.status_code for r in refused} == {400}
    sampler.sample()

    series = c.get(f"/v1/dashboard/deployments/{deployment['id']}/series", params={"window": "600"}).json()
    points = series["points"]
    assert sum(p["requests"] for p in points) == 9 and sum(p["errors"] for p in points) == 3
    last = points[-1]
    assert 0 < last["latency_p50_ms"] <= last["latency_p95_ms"] <= last["latency_p99_ms"]
    # The gateway's histogram can place its slowest request at most at the bucket bound above what the client saw.
    ceiling = LATENCY_BUCKETS[min(bisect.bisect_left(LATENCY_BUCKETS, slowest), len(LATENCY_BUCKETS) - 1)]
    assert last["latency_p99_ms"] <= ceiling * 1000
    assert last["pending"] == 0 and last["tokens_per_s"] is None

    summary = c.get("/v1/dashboard/summary").json()
    [row] = summary["deployments"]
    assert (row["model"], row["version"], row["status"], row["gpu_type"]) == ("tiny", 1, "ready", "cpu")
    assert row["ready_replicas"] >= 1 and row["starting_replicas"] == 0
    assert all(s >= 0 for s in row["cold_start_seconds"])  # noted at the provisioner's tick after the start
    assert row["kind"] == "tensor" and row["traffic_percent"] is None
    today = summary["usage_by_day"][-1]
    assert len(summary["usage_by_day"]) == 14 and today["day"] == time.strftime("%Y-%m-%d", time.gmtime())
    assert today["requests"] == 6 and today["cost"] > 0  # the refused requests were never billed
    failures = summary["failures"]
    assert [f["status"] for f in failures] == [400, 400, 400]
    assert all(f["reason"] == "invalid" and f["deployment_id"] == deployment["id"] for f in failures)
    assert all(f["message"].startswith("input 'x' must have shape (batch, 4), got (1, 5)") for f in failures)
    assert failures[0]["model"] == "tiny" and failures[0]["version"] == "1" and len(failures[0]["request_id"]) == 32

    assert c.put("/v1/models/tiny/traffic", json={"split": {"1": 100}}).status_code == 200
    narrowed = c.get("/v1/dashboard/summary", params={"days": "1", "failures": "2"}).json()
    assert narrowed["deployments"][0]["traffic_percent"] == 100
    assert len(narrowed["usage_by_day"]) == 1 and narrowed["failures"] == failures[:2]


@pytest.mark.parametrize(
    ("path", "params", "named"),
    [
        ("/v1/dashboard/summary", {"days": "0"}, "days"),
        ("/v1/dashboard/summary", {"failures": "many"}, "failures"),
        ("/v1/dashboard/deployments/1/series", {"window": "5"}, "window"),
    ],
)
def test_bad_parameters_are_named(server, path, params, named):
    r = server.client().get(path, params=params)
    assert r.status_code == 400 and r.json()["error"].startswith(f"{named}:"), r.text


def test_the_page_and_its_files_are_served_without_a_key(server):
    c = server.client(key=None)
    page = c.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/dashboard/static/dashboard.js" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    for name, kind in (("dashboard.js", "javascript"), ("dashboard.css", "text/css")):
        served = c.get(f"/dashboard/static/{name}")
        assert served.status_code == 200 and kind in served.headers["content-type"]
    assert c.get("/dashboard/static/../app.py").status_code == 404
    assert c.get("/v1/dashboard/summary").status_code == 401
