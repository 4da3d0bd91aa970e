"""Prefix-cache affinity through the OpenAI API, on the embedded default's memory transport and on Redis: a
deployment with two thread workers; a completion's prompt, then follow-ups sharing its long prefix sent at once,
all go to the worker that served it, even while it is the slower, busier one, whose engine finds the prefix cached
(the workers endpoint shows its reused prompt tokens; the other worker reused none)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from luminal.llm_package import build_package, save_package
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload
from tests.llm_folders import hf_folder
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)
from tests.scheduler.test_billing_under_kills import ready_workers

BLOCK, FOLLOW_UPS = 16, 3  # the package's KV block size; follow-ups, with the long one as many as a batch's rows
SLOW_ROUND_S = 0.05
PREFIX = "the quick brown fox jumps over the lazy dog " * 3  # over 60 tokens: more than two blocks


@pytest.fixture(params=["memory", "redis"])
def settings(request, tmp_path) -> Settings:
    queue = {}
    if request.param == "redis":
        queue = dict(queue_url=REDIS_URL, queue_namespace=request.getfixturevalue("redis_namespace"))
    return Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'meta.db'}",
                    bootstrap_key=BOOTSTRAP_KEY, compile_runner=COMPILE_RUNNER, worker_backend="thread",
                    **queue)  # fmt: skip


def loads_by_worker(http, deployment_id: int) -> dict[str, dict]:
    workers = http.get(f"/v1/deployments/{deployment_id}/workers").json()["workers"]
    return {w["worker_id"]: w["sequences"] for w in workers if "sequences" in w}


def wait_for(condition, what: str, timeout: float = 15.0, every_s: float = 0.05):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(every_s)
    return found


def test_follow_ups_sharing_a_prefix_go_to_the_worker_caching_it(server, tmp_path):
    folder = tmp_path / "llama"
    hf_folder(folder, "llama")
    save_package(build_package(folder, max_batch=4, positions=96), folder / "model.lpkg")
    http = server.client()
    assert upload(http, "tiny-llama", (folder / "model.lpkg").read_bytes()).status_code == 201
    deployment = deploy_and_wait(http, "tiny-llama", gpu_type="cpu", min_replicas=2, max_replicas=2)
    ready_workers(http, deployment["id"], 2, timeout=120)
    wait_for(lambda: len(loads_by_worker(http, deployment["id"])) == 2, "both workers report their load")

    def complete(prompt: str, max_tokens: int = 4) -> None:
        body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True}  # fmt: skip
        answer = http.post("/openai/v1/completions", json=body)
        assert answer.status_code == 200, answer.text

    complete(PREFIX + "first")
    holders = wait_for(
        lambda: [w for w, load in loads_by_worker(http, deployment["id"]).items() if load["cached_prefixes"] >= 2],
        "a worker reports the prompt's prefix cached",
    )
    assert len(holders) == 1
    # The holder is made the slower worker, busy with a long sequence (sharing the prefix too, so it goes there):
    # a router ignoring prefixes would let the idle worker take the follow-ups first.
    [engine] = [e for _, e in server.platform.generation.snapshot() if e.batch.pool.index]
    fast_round = engine.run_once
    engine.run_once = lambda: (time.sleep(SLOW_ROUND_S), fast_round())[1]
    with ThreadPoolExecutor(FOLLOW_UPS + 1) as pool:
        long = pool.submit(complete, PREFIX + "long", 16)
        wait_for(lambda: engine.running, "the long sequence runs on the holder")
        list(pool.map(complete, [PREFIX + f"follow up {k}" for k in range(FOLLOW_UPS)]))
        long.result()

    def reused() -> dict[str, int]:
        return {w: load["reused_prompt_tokens"] for w, load in loads_by_worker(http, deployment["id"]).items()}

    wait_for(lambda: reused()[holders[0]] >= (FOLLOW_UPS + 1) * 2 * BLOCK, "the holder reports its reused tokens")
    assert sum(reused().values()) == reused()[holders[0]]  # the other worker served none of them
