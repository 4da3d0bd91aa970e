"""The distributed shape of language-model serving on one machine: a gateway on Redis whose LLM deployment has two
warm worker processes, each holding an engine; 16 concurrent streams through the `openai` client each equal
transformers' generate(), and the sequences are billed by both workers (through the usage stream the gateway
drains), each request once. One worker SIGKILLed while streams run: every stream completes equal to generate() or
ends with an error event naming the worker's death within a bounded time, the provisioner replaces the worker, new
streams are served, and no request is billed twice; the tokens the dead worker delivered are billed under its id
and the deployment's GPU type. A prompt past the context is a 400 naming the limit."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time

import openai
import pytest
import redis
import torch
from sqlalchemy import select

from luminal.llm_package import build_package, save_package
from luminal.scheduler.generation.stream import Started
from luminal.scheduler.sequences.codec import decode_event
from luminal.store.database import Database
from luminal.store.settings import Settings
from luminal.store.tables import UsageRecordRow
from tests.gateway.conftest import BOOTSTRAP_KEY, COMPILE_RUNNER, deploy_and_wait, upload
from tests.llm_folders import hf_folder, hf_tokenizer
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)
from tests.scheduler.test_billing_under_kills import ready_workers

STREAMS, MAX_BATCH, POSITIONS = 16, 8, 96
KILLED_TOKENS, KILLED_POSITIONS = 300, 320  # the kill test's streams
WORDS = "the quick brown fox jumps over the lazy dog hello world luminal compiler language models answer".split()


@pytest.fixture
def settings(tmp_path, redis_namespace) -> Settings:  # noqa: F811 (the fixture above)
    return Settings(data_dir=tmp_path / "data", database_url=f"sqlite:///{tmp_path / 'meta.db'}",
                    bootstrap_key=BOOTSTRAP_KEY, compile_runner=COMPILE_RUNNER, queue_url=REDIS_URL,
                    queue_namespace=redis_namespace, worker_backend="process")  # fmt: skip


def deployed_llama(server, tmp_path, positions: int = POSITIONS):
    """(transformers model, tokenizer, deployment, ready worker rows) with two warm worker processes."""
    folder = tmp_path / "llama"
    model = hf_folder(folder, "llama")
    save_package(build_package(folder, MAX_BATCH, positions), folder / "model.lpkg")
    http = server.client()
    assert upload(http, "tiny-llama", (folder / "model.lpkg").read_bytes()).status_code == 201
    deployment = deploy_and_wait(http, "tiny-llama", gpu_type="cpu", min_replicas=2, max_replicas=2)
    assert deployment["status"] == "ready"
    return model, hf_tokenizer(folder), deployment, ready_workers(http, deployment["id"], 2, timeout=120)


def expected_texts(model, tokenizer, jobs: list[tuple[str, int]]) -> list[str]:
    """transformers' greedy generate() of each (prompt, max_tokens), as the completions endpoint's text."""
    return [tokenizer.decode(greedy_ids(model, tokenizer, prompt, n), skip_special_tokens=True) for prompt, n in jobs]


def greedy_ids(model, tokenizer, prompt: str, n: int) -> list[int]:
    """The `n` token ids transformers' greedy generate() puts after `prompt`."""
    ids = tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0,
                             eos_token_id=None)  # fmt: skip
    return out[0, len(ids) :].tolist()


def async_client(server) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server.url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=120)


async def streamed(
    client, prompt: str, n: int, first_chunk: asyncio.Event | None = None, seen: list[str] | None = None
) -> tuple[str, str]:
    """(request id, text) of one streamed completion; its request id also put in `seen` with its first chunk (so a
    stream that fails later is still known by it)."""
    stream = await client.completions.create(model="tiny-llama", prompt=prompt, max_tokens=n, temperature=0,
                                             stream=True, extra_body={"ignore_eos": True})  # fmt: skip
    parts, request_id = [], None
    async for chunk in stream:
        if request_id is None and seen is not None:
            seen.append(chunk.id.removeprefix("cmpl-"))
        request_id = chunk.id.removeprefix("cmpl-")
        parts.append(chunk.choices[0].text)
        if first_chunk is not None:
            first_chunk.set()
    return request_id, "".join(parts)


def billed_by_worker(settings) -> list[tuple[str, str]]:
    """(worker id, request id) of every billed request."""
    db = Database(settings.resolved_database_url)
    try:
        with db.session() as session:
            rows = session.execute(select(UsageRecordRow.worker_id, UsageRecordRow.request_ids)).all()
    finally:
        db.dispose()
    return [(worker, rid) for worker, ids in rows for rid in ids]


def billed_records(config) -> list[tuple[str, str, str, int]]:
    """(request id, worker id, GPU type, completion tokens) of every billed request."""
    db = Database(config.resolved_database_url)
    try:
        with db.session() as session:
            rows = session.execute(select(UsageRecordRow.request_ids, UsageRecordRow.worker_id,
                                          UsageRecordRow.gpu_type, UsageRecordRow.completion_tokens)).all()  # fmt: skip
    finally:
        db.dispose()
    return [(rid, worker, gpu, tokens) for ids, worker, gpu, tokens in rows for rid in ids]


def takers(config, request_id: str, first_only: bool = False) -> list[str]:
    """The workers that took the sequence, in order, as its events stream on Redis names them (its Started events:
    a dead worker's sequence that had sent nothing is taken again); `first_only`: only its first event is read."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        entries = client.xrange(f"{config.queue_namespace}:seq:events:{request_id}", count=1 if first_only else None)
    finally:
        client.close()
    events = (decode_event(fields[b"e"]) for _, fields in entries)
    return [event.worker_id for event in events if isinstance(event, Started)]


def worker_of(config, request_id: str) -> str | None:
    """The worker that took the sequence first (its first event is Started)."""
    return next(iter(takers(config, request_id, first_only=True)), None)


def test_two_worker_processes_serve_concurrent_streams_equal_to_generate(server, settings, tmp_path):
    model, tokenizer, deployment, ready = deployed_llama(server, tmp_path)
    jobs = [(" ".join(WORDS[k % 7 : k % 7 + 1 + k % 5]), 4 + k % 9) for k in range(STREAMS)]

    async def together():
        client = async_client(server)
        try:
            return await asyncio.gather(*(streamed(client, p, n) for p, n in jobs))
        finally:
            await client.close()

    answers = asyncio.run(together())
    assert [text for _, text in answers] == expected_texts(model, tokenizer, jobs)

    assert server.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    billed = billed_by_worker(settings)
    assert sorted(rid for _, rid in billed) == sorted(rid for rid, _ in answers)  # each stream billed once
    assert {worker for worker, _ in billed} == {w["worker_id"] for w in ready}  # by both workers
    tokens = {rid: (gpu, n) for rid, _, gpu, n in billed_records(settings)}  # as the deployment's GPU type
    assert [tokens[rid] for rid, _ in answers] == [(deployment["gpu_type"], n) for _, n in jobs]
    rows = server.client().get(f"/v1/deployments/{deployment['id']}/workers").json()["workers"]
    assert all(w["sequences"]["kv_blocks_free"] > 0 for w in rows) and len(rows) == 2  # each reports its load

    # A prompt past the context is refused by the gateway, naming the limit, before anything reaches a worker.
    for stream in (False, True):
        body = {"model": "tiny-llama", "prompt": [5] * (POSITIONS + 1), "max_tokens": 1, "stream": stream}
        r = server.client().post("/openai/v1/completions", json=body)
        assert r.status_code == 400 and f"maximum context length is {POSITIONS}" in r.json()["error"]["message"]
    assert server.platform.sequences.depth(deployment["id"]) == 0


def test_a_worker_killed_mid_stream_ends_its_streams_with_an_error_and_bills_nothing_twice(
    server, settings, tmp_path, capsys
):
    # Long enough that the victim's streams are still running when the kill lands: the poll below finds the
    # victim's first token between steps, and with 70 tokens a fast relay sometimes finished them all first.
    model, tokenizer, deployment, ready = deployed_llama(server, tmp_path, positions=KILLED_POSITIONS)
    jobs = [(" ".join(WORDS[k % 7 : k % 7 + 1 + k % 3]), KILLED_TOKENS) for k in range(STREAMS)]
    victim = ready[0]
    seen: list[list[str]] = [[] for _ in jobs]  # each stream's request id, once its first chunk came

    async def killed_during_streams():
        client, first_chunk = async_client(server), asyncio.Event()
        try:
            tasks = [asyncio.create_task(streamed(client, p, n, first_chunk, ids)) for (p, n), ids in zip(jobs, seen)]
            await first_chunk.wait()
            # Killed once one of its streams has tokens: that one must end with the error (and its tokens be billed).
            deadline = time.monotonic() + 60
            while not any(worker_of(settings, ids[0]) == victim["worker_id"] for ids in seen if ids):
                assert time.monotonic() < deadline, "no stream of the victim got a token"
                await asyncio.sleep(0.01)
            os.kill(victim["pid"], signal.SIGKILL)
            killed_at = time.monotonic()
            outcomes, error_after_s = [], []
            for task in asyncio.as_completed(tasks):  # as each ends, so an error's time is its own
                try:
                    await task
                except openai.APIError:
                    error_after_s.append(time.monotonic() - killed_at)
            for task in tasks:
                outcomes.append((None, task.exception()) if task.exception() else task.result())
            return outcomes, max(error_after_s, default=0.0), time.monotonic() - killed_at
        finally:
            await client.close()

    outcomes, error_s, last_s = asyncio.run(killed_during_streams())
    expected = expected_texts(model, tokenizer, jobs)
    completed = [rid for (rid, text), want in zip(outcomes, expected, strict=True) if rid is not None]
    for (rid, answer), want in zip(outcomes, expected, strict=True):
        if rid is not None:
            assert answer == want
        else:
            assert f"worker {victim['worker_id']} died" in str(answer.body["message"]), answer
    assert error_s < 10  # the streams cut off ended within a bounded time of the kill, none hung
    assert len(completed) < STREAMS  # the victim's stream that had tokens ended with the error

    http = server.client()
    replaced = ready_workers(http, deployment["id"], 2, timeout=120)
    assert victim["worker_id"] not in {w["worker_id"] for w in replaced}

    async def after():
        client = async_client(server)
        try:
            return await asyncio.gather(*(streamed(client, p, 6) for p, _ in jobs[:4]))
        finally:
            await client.close()

    later = asyncio.run(after())
    assert [text for _, text in later] == expected_texts(model, tokenizer, [(p, 6) for p, _ in jobs[:4]])
    sequences = server.platform.sequences
    assert sequences.depth(deployment["id"]) == sequences.in_flight(deployment["id"]) == 0  # no load left behind

    assert server.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    billed = [rid for _, rid in billed_by_worker(settings)]
    assert len(billed) == len(set(billed))  # nothing billed twice
    # What the victim delivered before it died is billed under its id and the deployment's GPU type, by the relay.
    tokens = {rid: (worker, gpu, n) for rid, worker, gpu, n in billed_records(settings)}
    for (rid, answer), ids in zip(outcomes, seen, strict=True):
        if rid is None:
            delivered = int(re.search(r"after (\d+) tokens", answer.body["message"]).group(1))
            assert tokens[ids[0]] == (victim["worker_id"], deployment["gpu_type"], delivered)
    assert set(completed) | {rid for rid, _ in later} <= set(billed)  # every completed stream billed
    with capsys.disabled():
        print(f"\nworker SIGKILLed mid-stream: streams={STREAMS} completed={len(completed)} "
              f"ended_with_error={STREAMS - len(completed)} last_error_after_kill={error_s:.2f}s "
              f"last_stream_end_after_kill={last_s:.2f}s "
              f"billed_requests={len(billed)}")  # fmt: skip
