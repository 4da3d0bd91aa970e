"""A gateway killed while relaying language-model streams, on Redis with two warm worker processes: a second gateway
(a process relaying its own sequences) is SIGKILLed mid-stream while this gateway's streams run through the `openai`
client. This gateway's streams finish equal to transformers' generate(); the killed gateway's sequences are dropped
by the workers within a bounded time (its reader lease lapses: nothing is left in flight, every KV block comes
back) and each is billed once, for the tokens generated before it was dropped, under the worker that ran it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from sqlalchemy import select

from luminal.store.database import Database
from luminal.store.tables import Deployment
from tests.gateway.test_llm_worker_processes import (  # noqa: F401 (settings: a fixture)
    WORDS,
    async_client,
    billed_records,
    deployed_llama,
    expected_texts,
    settings,
    streamed,
)
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
POSITIONS = 448  # long enough that the killed gateway's sequences are still running when its lease lapses
RELAYED, RELAYED_TOKENS, LEASE_S = 4, 400, 0.5
DROPPED_WITHIN_S = 15.0  # the lease, a worker's step and its next load report (each second), with room to spare


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


def test_a_gateway_killed_mid_stream_ends_only_its_own_streams(server, settings, tmp_path, redis_namespace, capsys):  # noqa: F811
    model, tokenizer, deployment, ready = deployed_llama(server, tmp_path, POSITIONS)
    sequences, d = server.platform.sequences, deployment["id"]
    full = {w: load.kv_blocks_free for w, load in sequences.loads(d).items()}
    prompts = [tokenizer(" ".join(WORDS[k : k + 3]))["input_ids"] for k in range(RELAYED)]
    other = RelayProcess({"redis_url": REDIS_URL, "namespace": redis_namespace, "deployment_id": d,
                          "tenant_id": deployment_tenant(settings, d), "gpu_type": deployment["gpu_type"],
                          "prompts": prompts, "max_tokens": RELAYED_TOKENS, "lease_s": LEASE_S})  # fmt: skip
    jobs = [(" ".join(WORDS[k % 5 : k % 5 + 2 + k % 3]), 24 + k) for k in range(6)]

    async def ours_while_the_other_dies():
        client, first_chunk = async_client(server), asyncio.Event()
        try:
            tasks = [asyncio.create_task(streamed(client, p, n, first_chunk)) for p, n in jobs]
            await asyncio.to_thread(other.wait_for_tokens, RELAYED, 60)
            await first_chunk.wait()
            other.kill()
            return await asyncio.gather(*tasks), time.monotonic()
        finally:
            await client.close()

    try:
        answers, killed_at = asyncio.run(ours_while_the_other_dies())
    finally:
        if other.process.poll() is None:
            other.kill()
    assert [text for _, text in answers] == expected_texts(model, tokenizer, jobs)  # ours ran on, whole
    dropped_s = wait_until_dropped(sequences, d, full, DROPPED_WITHIN_S) + (time.monotonic() - killed_at)

    assert server.platform.usage_drainer.flush(timeout=60), "the usage records were not drained"
    billed = billed_records(settings)
    assert len(billed) == len({rid for rid, *_ in billed})  # nothing billed twice
    relayed = {rid: (worker, gpu, tokens) for rid, worker, gpu, tokens in billed if rid in other.received}
    assert set(relayed) == set(other.received)  # each of its sequences billed, by the worker that ran it
    for rid, (worker, gpu, tokens) in relayed.items():
        assert worker in {w["worker_id"] for w in ready} and gpu == deployment["gpu_type"]
        assert other.received[rid] <= tokens < RELAYED_TOKENS  # what was generated: dropped before its end
    assert {rid for rid, _ in answers} <= {rid for rid, *_ in billed}
    with capsys.disabled():
        print(f"\ngateway SIGKILLed mid-stream: its sequences dropped {dropped_s:.2f}s after the kill (lease "
              f"{LEASE_S}s), billed tokens {sorted(t for *_, t in relayed.values())}, "
              f"received {sorted(other.received.values())}")  # fmt: skip
