"""`/metrics` shows a worker process's language-model gauges (gateway/worker_metrics.py), read from the load reports
it publishes on Redis, labelled by deployment and worker: its running sequence and the KV cache blocks it holds
while it generates, its tokens per second, and its slot free again after; the gateway itself holds no engine."""

from __future__ import annotations

import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.llm_process_world import POSITIONS, serving
from tests.gateway.test_llm_routing_api import wait_for
from tests.scheduler.queue_fixtures import fresh_namespace

RATE = "luminal_worker_generation_tokens_per_second"
PROMPT = "the quick brown fox jumps over the lazy dog " * 2  # over two KV blocks: its prefill publishes prefixes


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llm-metrics")
    with fresh_namespace() as namespace, serving(tmp, namespace) as world:
        yield world


def worker_gauges(http: httpx.Client) -> dict[str, dict[tuple[str, str], float]]:
    """Each luminal_worker_* gauge's value by (deployment, worker)."""
    text = http.get("/metrics").text
    assert "luminal_sequences_running{" not in text  # no engine in the gateway: the figures come from reports
    gauges: dict[str, dict[tuple[str, str], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("luminal_worker_"):
                labels = (sample.labels["deployment"], sample.labels["worker"])
                gauges.setdefault(sample.name, {})[labels] = sample.value
    return gauges


def test_a_worker_process_load_shows_in_metrics_by_deployment_and_worker(world):
    http = world.http()  # closed with the module's gateway
    [worker] = [w["worker_id"] for w in http.get(f"/v1/deployments/{world.deployment['id']}/workers").json()["workers"]]
    key = (str(world.deployment["id"]), worker)
    body = {"model": "tiny-llama", "prompt": PROMPT, "max_tokens": POSITIONS - 128, "temperature": 0,
            "ignore_eos": True}  # fmt: skip
    answer: list[httpx.Response] = []
    generating = threading.Thread(target=lambda: answer.append(http.post("/openai/v1/completions", json=body)))
    seen: dict[str, float] = {}

    def saw(condition) -> bool:
        gauges = worker_gauges(http)
        for name, values in gauges.items():
            if key in values:
                seen[name] = max(seen.get(name, 0.0), values[key])
        return condition(gauges)

    generating.start()
    try:
        wait_for(lambda: saw(lambda g: g["luminal_worker_sequences_running"].get(key) == 1), "the worker reports "
                   "its sequence running")  # fmt: skip
    finally:
        generating.join(120)
    assert answer[0].status_code == 200, answer[0].text
    assert seen["luminal_worker_kv_cache_blocks_in_use"] > 0  # its sequence's blocks, while it ran

    def settled(gauges) -> bool:  # a report made after the sequence ended, and one that counted its tokens
        return gauges["luminal_worker_sequences_running"].get(key) == 0 and seen.get(RATE, 0.0) > 0

    wait_for(lambda: saw(settled), "the worker reports its tokens per second and its slot free")
    gauges = worker_gauges(http)
    assert gauges["luminal_worker_sequences_waiting"][key] == 0
    assert gauges["luminal_worker_kv_cache_blocks_free"][key] > 0
    assert set(gauges["luminal_worker_sequences_running"]) == {key}  # one worker, labelled with its deployment
