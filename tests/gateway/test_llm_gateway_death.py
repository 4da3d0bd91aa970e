"""A gateway killed while relaying language-model streams, on Redis with two warm worker processes: a second gateway
is SIGKILLed mid-stream while this gateway's streams run through the `openai` client; the second is a process that
only relays sequences it submitted, or a whole `luminal serve` with `openai` clients streaming through it. This
gateway's streams finish equal to transformers' generate(); the killed gateway's sequences are dropped by the
workers within a bounded time (its reader lease lapses: nothing is left in flight, every KV block comes back) and
each is billed once, for the tokens generated before it was dropped, under the worker that ran it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import openai
from sqlalchemy import select

from luminal.store.database import Database
from luminal.store.tables import Deployment
from tests.gateway import test_llm_worker_processes as worker_processes
from tests.gateway.conftest import BOOTSTRAP_KEY
from tests.gateway.test_llm_worker_processes import (
    WORDS,
    async_client,
    billed_records,
    deployed_llama,
    expected_texts,
    streamed,
)
from tests.scaleout.cluster import Gateway, Shared
from tests.scheduler import queue_fixtures
from tests.scheduler.queue_fixtures import REDIS_URL

settings, redis_namespace = worker_processes.settings, queue_fixtures.redis_namespace  # the fixtures, used here
ROOT = Path(__file__).resolve().parents[2]
# Long enough that the killed gateway's sequences are still running when its lease lapses: a loaded CI machine
# generated all of 400 tokens before the drop; quiet runs generate 50-240.
POSITIONS = 2048
RELAYED, RELAYED_TOKENS, LEASE_S = 4, 2000, 0.5
DROPPED_WITHIN_S = 15.0  # the lease, a worker's step and its next load report (each second), with room to spare


JOBS = [(" ".join(WORDS[k % 5 : k % 5 + 2 + k % 3]), 24 + k) for k in range(6)]  # this gateway's streams


class OtherGatewayStreams:
    """Streams through the other gateway, on a thread of their own: the tokens (chunks) each got, by request id,
    until the gateway's death cuts them off."""

    def __init__(self, url: str, count: int):
        self.client = openai.OpenAI(base_url=f"{url}/openai/v1", api_key=BOOTSTRAP_KEY, max_retries=0, timeout=120)
        self.received: dict[str, int] = {}
        self.ended: list[BaseException | None] = []
        self.threads = [threading.Thread(target=self._stream, args=(k,), daemon=True) for k in range(count)]
        for thread in self.threads:
            thread.start()

    def _stream(self, k: int) -> None:
        try:
            stream = self.client.completions.create(model="tiny-llama", prompt=" ".join(WORDS[k : k + 3]),
                                                    max_tokens=RELAYED_TOKENS, temperature=0, stream=True,
                                                    extra_body={"ignore_eos": True})  # fmt: skip
            for chunk in stream:
                request_id = chunk.id.removeprefix("cmpl-")
                self.received[request_id] = self.received.get(request_id, 0) + 1
            self.ended.append(None)
        except Exception as e:  # cut off with its gateway
            self.ended.append(e)

    def wait_for_tokens(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < len(self.threads):
            assert time.monotonic() < deadline, f"the other gateway's streams got no tokens: {self.received}"
            time.sleep(0.05)

    def join(self, timeout: float) -> int:
        """How many of the streams were cut off (the rest ended whole)."""
        for thread in self.threads:
            thread.join(timeout)
        return sum(e is not None for e in self.ended)


class RelayProcess:
    """The other gateway: a process relaying its own sequences, the tokens it received read from its output."""

    def __init__(self, spec: dict):
        self.process = subprocess.Popen([sys.executable, "-m", "tests.gateway.relay_process", json.dumps(spec)],
                                        cwd=ROOT, stdout=subprocess.PIPE, text=True)  # fmt: skip
        self.received: dict[str, int] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            request_id, tokens = line.split()
            self.received[request_id] = int(tokens)

    def wait_for_tokens(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len([n for n in self.received.values() if n > 0]) < count:
            assert self.process.poll() is None, "the relaying process ended early"
            assert time.monotonic() < deadline, f"the relayed sequences got no tokens: {self.received}"
            time.sleep(0.05)

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self._reader.join(10)


def deployment_tenant(config, deployment_id: int) -> int:
    db = Database(config.resolved_database_url)
    try:
        with db.session() as session:
            return session.execute(select(Deployment.tenant_id).where(Deployment.id == deployment_id)).scalar_one()
    finally:
        db.dispose()


def free_blocks_of_both(sequences, deployment_id: int, timeout: float = 30) -> dict[str, int]:
    """Each worker's free KV blocks before any load, once both have reported (ready in the registry comes first)."""
    deadline = time.monotonic() + timeout
    while len(loads := sequences.loads(deployment_id)) < 2:
        assert time.monotonic() < deadline, f"the two workers did not report their loads: {loads}"
        time.sleep(0.05)
    return {w: load.kv_blocks_free for w, load in loads.items()}


def wait_until_dropped(sequences, deployment_id: int, full: dict[str, int], timeout: float) -> float:
    """Seconds until nothing is in flight and every worker reports no sequence running and all its blocks free."""
    began = time.monotonic()
    while True:
        loads = sequences.loads(deployment_id)
        idle = all(load.running == 0 and load.kv_blocks_free == full[w] for w, load in loads.items())
        if sequences.in_flight(deployment_id) == 0 and idle and set(loads) == set(full):
            return time.monotonic() - began
        held = sequences.in_flight(deployment_id)
        assert time.monotonic() - began < timeout, f"still held: {loads}, in flight {held}"
        time.sleep(0.1)


def ours_while_the_other_dies(server, jobs, other_started: Callable[[], None], kill: Callable[[], None]):
    """This gateway's streams of `jobs` (request id, text), the other gateway killed once it and they have tokens;
    and when it was killed (time.monotonic())."""

    async def run():
        client, first_chunk = async_client(server), asyncio.Event()
        try:
            tasks = [asyncio.create_task(streamed(client, p, n, first_chunk)) for p, n in jobs]
            await asyncio.to_thread(other_started)
            await first_chunk.wait()
            kill()
            return await asyncio.gather(*tasks), time.monotonic()
        finally:
            await client.close()

    return asyncio.run(run())


def check_dropped_and_billed(server, config, deployment, ready, full, received: dict[str, int], answers) -> float:
    """The killed gateway's sequences (`received`: request id -> tokens it got) were dropped, each billed once for
    what was generated under the worker that ran it; this gateway's answers billed. Seconds the drop took from
    now (the end of this gateway's streams)."""
    dropped_s = wait_until_dropped(server.platform.sequences, deployment["id"], full, DROPPED_WITHIN_S)
    assert server.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    billed = billed_records(config)
    assert len(billed) == len({rid for rid, *_ in billed})  # nothing billed twice
    theirs = {rid: (worker, gpu, tokens) for rid, worker, gpu, tokens in billed if rid in received}
    assert set(theirs) == set(received)  # each of its sequences billed, by the worker that ran it
    for rid, (worker, gpu, tokens) in theirs.items():
        assert worker in {w["worker_id"] for w in ready} and gpu == deployment["gpu_type"]
        assert received[rid] <= tokens, f"{rid}: billed {tokens} tokens, its reader got {received[rid]}"
        assert tokens < RELAYED_TOKENS, f"{rid} ran to its end ({tokens} tokens): not dropped when its lease lapsed"
    assert {rid for rid, _ in answers} <= {rid for rid, *_ in billed}
    return dropped_s


def test_a_relay_process_killed_mid_stream_ends_only_its_streams(server, settings, tmp_path, redis_namespace, capsys):
    model, tokenizer, deployment, ready = deployed_llama(server, tmp_path, POSITIONS)
    d = deployment["id"]
    full = free_blocks_of_both(server.platform.sequences, d)
    prompts = [tokenizer(" ".join(WORDS[k : k + 3]))["input_ids"] for k in range(RELAYED)]
    other = RelayProcess({"redis_url": REDIS_URL, "namespace": redis_namespace, "deployment_id": d,
                          "tenant_id": deployment_tenant(settings, d), "gpu_type": deployment["gpu_type"],
                          "prompts": prompts, "max_tokens": RELAYED_TOKENS, "lease_s": LEASE_S})  # fmt: skip
    try:
        answers, killed_at = ours_while_the_other_dies(server, JOBS, lambda: other.wait_for_tokens(RELAYED, 60),
                                                       other.kill)  # fmt: skip
    finally:
        if other.process.poll() is None:
            other.kill()
    assert [text for _, text in answers] == expected_texts(model, tokenizer, JOBS)  # ours ran on, whole
    after_kill_s = time.monotonic() - killed_at
    after_kill_s += check_dropped_and_billed(server, settings, deployment, ready, full, other.received, answers)
    with capsys.disabled():
        print(f"\nrelaying process SIGKILLed mid-stream: its sequences dropped within "
              f"{after_kill_s:.2f}s of the kill (lease {LEASE_S}s)")  # fmt: skip


def test_a_gateway_process_killed_mid_stream_ends_only_its_streams(server, settings, tmp_path, redis_namespace, capsys):
    model, tokenizer, deployment, ready = deployed_llama(server, tmp_path, POSITIONS)
    d = deployment["id"]
    full = free_blocks_of_both(server.platform.sequences, d)
    extra = {"LUMINAL_COMPILE_RUNNER": "thread", "LUMINAL_READER_LEASE_S": str(LEASE_S)}
    shared = Shared(settings.resolved_database_url, REDIS_URL, redis_namespace, str(settings.artifacts_dir),
                    BOOTSTRAP_KEY, extra)  # fmt: skip
    other = Gateway(shared, tmp_path / "gateways", "gw-doomed").wait_ready(60)
    theirs = OtherGatewayStreams(other.url, RELAYED)
    try:
        answers, killed_at = ours_while_the_other_dies(server, JOBS, theirs.wait_for_tokens, other.kill)
    finally:
        if other.alive():
            other.kill()
    assert [text for _, text in answers] == expected_texts(model, tokenizer, JOBS)  # ours ran on, whole
    assert theirs.join(30) == RELAYED  # its clients' streams were cut off with it
    after_kill_s = time.monotonic() - killed_at
    after_kill_s += check_dropped_and_billed(server, settings, deployment, ready, full, theirs.received, answers)
    with capsys.disabled():
        print(f"\ngateway process SIGKILLed mid-stream: its sequences dropped within "
              f"{after_kill_s:.2f}s of the kill (lease {LEASE_S}s)")  # fmt: skip
