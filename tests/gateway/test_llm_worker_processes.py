"""The distributed shape of language-model serving on one machine: a gateway on Redis whose LLM deployment has two
warm worker processes, each holding an engine; 16 concurrent streams through the `openai` client each equal
transformers' generate(), and the sequences are billed by both workers (through the usage stream the gateway
drains), each request once."""

from __future__ import annotations

import asyncio

import openai
import pytest
import torch
from sqlalchemy import select

from luminal.llm_package import build_package, save_package
from luminal.store.database import Database
from luminal.store.settings import Settings
from luminal.store.tables import UsageRecordRow
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload
from tests.llm_folders import hf_folder, hf_tokenizer
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)
from tests.scheduler.test_billing_under_kills import ready_workers

STREAMS, MAX_BATCH, POSITIONS = 16, 8, 96
WORDS = "the quick brown fox jumps over the lazy dog hello world luminal compiler language models answer".split()


@pytest.fixture
def settings(tmp_path, redis_namespace) -> Settings:  # noqa: F811 (the fixture above)
    return Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'meta.db'}",
                    bootstrap_key=BOOTSTRAP_KEY, compile_runner=COMPILE_RUNNER, queue_url=REDIS_URL,
                    queue_namespace=redis_namespace, worker_backend="process")  # fmt: skip


def test_two_worker_processes_serve_concurrent_streams_equal_to_generate(server, settings, tmp_path):
    folder = tmp_path / "llama"
    model = hf_folder(folder, "llama")
    save_package(build_package(folder, MAX_BATCH, POSITIONS), folder / "model.lpkg")
    http = server.client()
    assert upload(http, "tiny-llama", (folder / "model.lpkg").read_bytes()).status_code == 201
    deployment = deploy_and_wait(http, "tiny-llama", gpu_type="cpu", min_replicas=2, max_replicas=2)
    assert deployment["status"] == "ready"
    workers = {w["worker_id"] for w in ready_workers(http, deployment["id"], 2, timeout=120)}

    tokenizer = hf_tokenizer(folder)
    jobs = [(" ".join(WORDS[k % 7 : k % 7 + 1 + k % 5]), 4 + k % 9) for k in range(STREAMS)]
    expected = []
    for prompt, n in jobs:
        ids = tokenizer(prompt)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0,
                                 eos_token_id=None)  # fmt: skip
        expected.append(tokenizer.decode(out[0, len(ids) :], skip_special_tokens=True))

    async def streamed(client, prompt: str, n: int) -> str:
        stream = await client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=n, temperature=0,
                                                 stream=True, extra_body={"ignore_eos": True})  # fmt: skip
        return "".join([chunk.choices[0].text async for chunk in stream])

    async def together():
        client = openai.AsyncOpenAI(base_url=f"{server.url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0,
                                    timeout=120)  # fmt: skip
        try:
            return await asyncio.gather(*(streamed(client, p, n) for p, n in jobs))
        finally:
            await client.close()

    assert asyncio.run(together()) == expected

    assert server.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    db = Database(settings.resolved_database_url)
    try:
        with db.session() as session:
            rows = session.execute(select(UsageRecordRow.worker_id, UsageRecordRow.request_ids)).all()
    finally:
        db.dispose()
    billed = [rid for _, ids in rows for rid in ids]
    assert len(billed) == len(set(billed)) == STREAMS  # each stream billed once
    assert {worker for worker, _ in rows} == workers  # by both workers
