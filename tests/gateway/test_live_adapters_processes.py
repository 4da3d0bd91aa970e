"""LoRA adapters added to and removed from a running language-model deployment reach its worker processes without a
restart: a gateway on Redis, a tiny Llama built with two free adapter slots, two warm worker processes. An adapter
added through the CLI is loaded by both (their reports name it), and completions called by its name through the
`openai` client equal transformers' greedy answer with PEFT's merged adapter, served by both workers, each request
billed once. Removed, it is a 404 and both workers report its slot free again. Adapters that do not fit are refused
4xx naming why; an artifact no worker can read, posted on the board behind the API's back, is reported by each
worker with its reason while both serve on; the same worker processes run throughout."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter

import httpx
import openai
import pytest
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer
from typer.testing import CliRunner

from luminal.cli.main import app as cli
from luminal.gateway.app import create_app
from luminal.llm_package import build_package, save_package
from luminal.lora_adapter import WEIGHTS, upload_body
from luminal.store.settings import Settings
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload
from tests.gateway.test_llm_routing_api import wait_for
from tests.gateway.test_llm_worker_processes import billed_by_worker
from tests.gateway.threaded_server import ThreadedServer, free_port
from tests.llm_folders import greedy_answer, hf_folder
from tests.lora_adapters import make_adapter
from tests.scheduler.queue_fixtures import REDIS_URL, fresh_namespace
from tests.scheduler.test_billing_under_kills import ready_workers

# Long enough that one worker's 4 rows stay busy while the burst arrives: the rest must go to the other worker.
NEW_TOKENS, PROMPTS = 24, [[9, 44, 120, 7], [3, 4, 5, 6, 7], [200, 17], [61, 62, 63], [8, 8, 1], [90, 91, 92, 93]]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live_adapters")
    with fresh_namespace() as namespace:
        settings = Settings(data_dir=tmp / "data", database_url=f"sqlite:///{tmp / 'meta.db'}",
                            bootstrap_key=BOOTSTRAP_KEY, compile_runner=COMPILE_RUNNER, queue_url=REDIS_URL,
                            queue_namespace=namespace, worker_backend="process")  # fmt: skip
        app = create_app(settings)
        server = ThreadedServer(app, free_port())
        server.start()
        try:
            hf = hf_folder(tmp / "base")
            # three slots: the base's and two for adapters added live; ranks up to 8
            save_package(build_package(tmp / "base", 4, 64, lora_slots=3, lora_rank=8), tmp / "m.lpkg")
            url = f"http://127.0.0.1:{server.config.port}"
            http = httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {BOOTSTRAP_KEY}"})
            assert upload(http, "tiny-llama", (tmp / "m.lpkg").read_bytes()).status_code == 201
            deployment = deploy_and_wait(http, "tiny-llama", gpu_type="cpu", min_replicas=2, max_replicas=2)
            workers = {w["worker_id"] for w in ready_workers(http, deployment["id"], 2, timeout=180)}
            wait_for(lambda: set(_reports(http, deployment["id"])) == workers, "both workers report", 60)
            late = make_adapter(hf, tmp / "late", 6, 12, ["k_proj", "o_proj", "down_proj"], seed=11)
            tokenizer = Tokenizer.from_file(str(tmp / "base" / "tokenizer.json"))
            yield url, http, deployment["id"], workers, hf, late, tokenizer, tmp, app, settings
            http.close()
        finally:
            server.stop()


def _reports(http: httpx.Client, deployment_id: int) -> dict[str, dict]:
    """Each worker's last load report, by worker id."""
    workers = http.get(f"/v1/deployments/{deployment_id}/workers").json()["workers"]
    return {w["worker_id"]: w["sequences"] for w in workers if "sequences" in w}


def _post(http: httpx.Client, deployment_id: int, body: dict) -> httpx.Response:
    return http.post(f"/v1/deployments/{deployment_id}/adapters", json=body)


def test_an_adapter_added_live_is_served_by_both_worker_processes(world):
    url, http, deployment_id, workers, hf, late, tokenizer, tmp, _, settings = world
    env = {"LUMINAL_URL": url, "LUMINAL_API_KEY": BOOTSTRAP_KEY}
    added = CliRunner().invoke(cli, ["adapters", "add", str(deployment_id), "late", str(tmp / "late")], env=env)
    assert added.exit_code == 0, added.output
    client = openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=120)

    async def complete(prompt):
        answer = await client.completions.create(model="late", prompt=prompt, max_tokens=NEW_TOKENS, temperature=0,
                                                 extra_body={"ignore_eos": True})  # fmt: skip
        return answer.id.removeprefix("cmpl-"), answer.choices[0].text

    def holding():
        return all("late" in r["lora_adapters"] for r in _reports(http, deployment_id).values())

    async def first_then_all_at_once():
        first = await complete(PROMPTS[0])  # at once: the gateway queues it once a worker reports holding it
        await asyncio.to_thread(wait_for, holding, "both workers report the adapter", 15)
        return [first, *await asyncio.gather(*(complete(p) for p in PROMPTS * 2))]  # more than one worker's rows

    answers = asyncio.run(first_then_all_at_once())
    for (_, text), prompt in zip(answers, [PROMPTS[0], *PROMPTS * 2]):
        want = greedy_answer(late, prompt, NEW_TOKENS)
        assert text == tokenizer.decode(want), prompt
    assert greedy_answer(late, PROMPTS[0], NEW_TOKENS) != greedy_answer(hf, PROMPTS[0], NEW_TOKENS)
    reports = wait_for(lambda: _reports(http, deployment_id), "reports")
    assert all("late" in r["lora_adapters"] and r["lora_slots_free"] == 1 for r in reports.values()), reports
    ids = {rid for rid, _ in answers}

    def billed_all():  # (worker, request) of these requests' usage records, once all are written
        billed = [(w, r) for w, r in billed_by_worker(settings) if r in ids]
        return billed if {r for _, r in billed} == ids else None

    billed = wait_for(billed_all, "every answered request is billed", 30)
    assert Counter(r for _, r in billed) == Counter(ids)  # each once
    assert {w for w, _ in billed} == workers  # both worker processes served the adapter
    assert {w["worker_id"] for w in ready_workers(http, deployment_id, 2)} == workers  # no restart


def test_a_removed_adapter_is_a_404_and_its_slot_is_free_on_every_worker(world):
    url, http, deployment_id, workers, *_ = world
    assert http.delete(f"/v1/deployments/{deployment_id}/adapters/late").status_code == 204
    client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError, match="late"):
        client.completions.create(model="late", prompt=[5, 6], max_tokens=1)

    def freed():
        reports = _reports(http, deployment_id)
        done = set(reports) == workers and all(
            r["lora_slots_free"] == 2 and r["lora_adapters"] == [] for r in reports.values()
        )
        return done and reports

    wait_for(freed, "both workers report the slot free", 15)


def test_adapters_that_do_not_fit_are_refused_and_no_worker_breaks(world):
    _, http, deployment_id, workers, hf, _, _, tmp, *_ = world
    make_adapter(hf, tmp / "wide", 20, 8, ["q_proj"], seed=12)
    wide = _post(http, deployment_id, upload_body("wide", tmp / "wide"))
    assert wide.status_code == 400 and "rank 20 is over" in wide.text
    make_adapter(hf, tmp / "head", 4, 8, ["lm_head"], seed=13)
    head = _post(http, deployment_id, upload_body("head", tmp / "head"))
    assert head.status_code == 400 and "lm_head" in head.text and "not an adapted projection" in head.text
    weights = load_file(str(tmp / "late" / WEIGHTS))
    first = sorted(weights)[0]
    weights[first] = weights[first] * float("nan")
    save_file(weights, str(tmp / "nan.safetensors"))
    nan_weights = base64.b64encode((tmp / "nan.safetensors").read_bytes()).decode()
    body = {**upload_body("nan", tmp / "late"), "weights_base64": nan_weights}
    refused = _post(http, deployment_id, body)
    assert refused.status_code == 400 and "NaN" in refused.text
    garbled = _post(http, deployment_id, {**upload_body("garbled", tmp / "late"), "weights_base64": "AAAA"})
    assert garbled.status_code == 400 and "does not read" in garbled.text
    assert _post(http, deployment_id, upload_body("one", tmp / "late")).status_code == 201
    assert _post(http, deployment_id, upload_body("two", tmp / "late")).status_code == 201
    full = _post(http, deployment_id, upload_body("three", tmp / "late"))
    assert full.status_code == 409 and "remove one first" in full.text
    for name in ("one", "two"):
        assert http.delete(f"/v1/deployments/{deployment_id}/adapters/{name}").status_code == 204
    base = http.post("/openai/v1/completions", json={"model": "tiny-llama", "prompt": [5, 6], "max_tokens": 2})
    assert base.status_code == 200, base.text
    assert {w["worker_id"] for w in ready_workers(http, deployment_id, 2)} == workers


def test_an_artifact_no_worker_can_read_is_reported_and_both_serve_on(world):
    """Behind the API's checks (a board on a shared Redis is read as hostile): each worker reports why it could not
    load the posted adapter, and a request for it, had one got through, is a 503 naming the reason."""
    url, http, deployment_id, workers, *_, gateway, _ = world
    platform = gateway.state.platform
    key = platform.artifacts.put_bytes(b"not a safetensors file")
    platform.sequences.adapters.post(deployment_id, "junk", key)
    try:

        def reported():
            reports = _reports(http, deployment_id)
            return set(reports) == workers and all("junk" in r["lora_errors"] for r in reports.values()) and reports

        reports = wait_for(reported, "both workers report the adapter they could not load", 15)
        assert all("junk" not in r["lora_adapters"] for r in reports.values())
        from luminal.gateway.adapter_wait import await_adapter
        from luminal.gateway.openai_errors import OpenAIError

        with pytest.raises(OpenAIError, match="'junk' could not be loaded") as refused:
            asyncio.run(await_adapter(platform.sequences, deployment_id, "junk", limit_s=5))
        assert refused.value.status == 503
    finally:
        platform.sequences.adapters.post(deployment_id, "junk", None)
    wait_for(lambda: all(r["lora_errors"] == {} for r in _reports(http, deployment_id).values()), "errors cleared")
    base = http.post("/openai/v1/completions", json={"model": "tiny-llama", "prompt": [5, 6], "max_tokens": 2})
    assert base.status_code == 200, base.text
    assert {w["worker_id"] for w in ready_workers(http, deployment_id, 2)} == workers
