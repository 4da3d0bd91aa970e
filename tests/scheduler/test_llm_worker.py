"""A language-model worker serving its deployment from the sequence transport: more concurrent sequences than its
batch has rows each equal transformers' generate(), each named as taken by the worker and billed once under its
id and device; a cancel reaches its engine at the next step and frees the sequence's cache; it reports its load;
told to stop, it reports at once that it has no free rows, finishes what it holds and leaves the registry and the
loads."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from luminal.llm_package import build_package, save_package
from luminal.scheduler.generation.language_model import compile_package
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account
from luminal.scheduler.llm_worker import LanguageModelWorker
from luminal.scheduler.registry import MemoryRegistry
from luminal.scheduler.sequences.memory import MemorySequences
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest
from luminal.scheduler.worker_spec import LLM_KIND, WorkerSpec
from tests.llm_folders import greedy_answer, hf_folder
from tests.scheduler.test_worker import ListLedger

DEPLOYMENT, MAX_BATCH = 21, 4


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llm-worker")
    hf = hf_folder(folder, "llama")
    save_package(build_package(folder, max_batch=MAX_BATCH, positions=64), folder / "m.lpkg")
    compile_package(folder / "m.lpkg", "cpu", folder / "m.llmprog")
    return hf, folder


def llm_spec() -> WorkerSpec:
    return WorkerSpec(DEPLOYMENT, tenant_id=1, model="tiny", version=1, program_key="m.llmprog", gpu_type="cpu",
                      max_batch_size=MAX_BATCH, max_queue_delay_ms=0, min_replicas=0, max_replicas=1,
                      signature={"kind": LLM_KIND}, symbols={}, prefill_chunk=8, max_waiting=16)  # fmt: skip


@pytest.fixture
def served(compiled):
    """(hf model, transport, worker, ledger, registry) with the worker running on a thread until the test ends."""
    hf, folder = compiled
    transport, registry, ledger = MemorySequences(), MemoryRegistry(), ListLedger()
    worker = LanguageModelWorker(llm_spec(), transport, lambda key: folder / key, ledger, registry, "llm-w1", "l4")
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    assert worker.ready.wait(120)
    yield hf, transport, worker, ledger, registry
    stop.set()
    thread.join(30)
    assert not thread.is_alive()


def submit(transport, prompt: list[int], max_tokens: int) -> RelayedStream:
    account = Account(uuid.uuid4().hex, DEPLOYMENT, 1, "cpu", "tiny", 1)
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    request = SequenceRequest(account, tuple(prompt), params, timeout_s=60)
    transport.submit(request, max_waiting=16)
    return RelayedStream(transport, request)


async def tokens_of(relay: RelayedStream, limit: int | None = None) -> list[int]:
    tokens = []
    async for delta in relay:
        tokens.append(delta.token)
        if len(tokens) == limit:
            break
    return tokens


def test_concurrent_sequences_equal_generate_and_are_billed_once_under_the_worker(served):
    hf, transport, worker, ledger, registry = served
    prompts = [[5 + k, 9, 13 + 2 * k, 7][: 2 + k % 3] * (1 + k % 2) for k in range(7)]  # 7 sequences, 4 rows
    relays = [submit(transport, p, 3 + 2 * k) for k, p in enumerate(prompts)]

    async def read_all():
        return await asyncio.gather(*(tokens_of(r) for r in relays))

    answers = asyncio.run(asyncio.wait_for(read_all(), 120))
    [registered] = registry.workers(DEPLOYMENT)
    for prompt, relay, tokens in zip(prompts, relays, answers, strict=True):
        assert tokens == greedy_answer(hf, prompt, relay.request.params.max_tokens)
        assert relay.worker_id == "llm-w1" and relay.completion_tokens == len(tokens)
        assert relay.worker_started_at == registered.started_at  # its takes name the process, as it registered
    records = {r.batch_id: r for r in ledger.records}
    assert set(records) == {r.request.id for r in relays} and len(ledger.records) == len(relays)
    for relay, tokens in zip(relays, answers, strict=True):
        record = records[relay.request.id]
        assert (record.worker_id, record.gpu_type) == ("llm-w1", "l4")
        assert (record.prompt_tokens, record.completion_tokens) == (len(relay.request.prompt), len(tokens))
    assert worker.engine.steps < sum(len(a) for a in answers)  # decode steps were shared
    assert transport.in_flight(DEPLOYMENT) == 0 and transport.depth(DEPLOYMENT) == 0


def test_a_cancel_reaches_the_engine_and_frees_the_cache(served):
    _, transport, worker, ledger, _ = served
    relay = submit(transport, [5, 6, 7, 8], 40)
    assert len(asyncio.run(asyncio.wait_for(tokens_of(relay, limit=2), 60))) == 2
    relay.cancel()
    deadline = time.monotonic() + 30
    while transport.in_flight(DEPLOYMENT) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert transport.in_flight(DEPLOYMENT) == 0
    assert not worker.engine.running and worker.engine.batch.pool.in_use == 0
    [record] = ledger.records
    assert 2 <= record.completion_tokens < 40  # billed for what it generated before the cancel


def test_a_stopped_worker_finishes_what_it_holds_and_deregisters(compiled):
    hf, folder = compiled
    transport, registry, ledger = MemorySequences(), MemoryRegistry(), ListLedger()
    worker = LanguageModelWorker(llm_spec(), transport, lambda key: folder / key, ledger, registry, "llm-w2")
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    assert worker.ready.wait(120)
    assert [w.worker_id for w in registry.workers(DEPLOYMENT) if w.ready] == ["llm-w2"]
    # Ready, it reported its load: nothing held, its whole KV pool free.
    deadline = time.monotonic() + 30
    while "llm-w2" not in transport.loads(DEPLOYMENT) and time.monotonic() < deadline:
        time.sleep(0.01)
    load = transport.loads(DEPLOYMENT)["llm-w2"]
    assert (load.running, load.waiting, load.kv_blocks_free) == (0, 0, worker.engine.batch.pool.blocks)
    relay = submit(transport, [5, 6, 7], 12)

    async def stop_after_first_token():
        tokens = []
        async for delta in relay:
            tokens.append(delta.token)
            stop.set()
        return tokens

    tokens = asyncio.run(asyncio.wait_for(stop_after_first_token(), 60))
    assert tokens == greedy_answer(hf, [5, 6, 7], 12)
    thread.join(30)
    assert not thread.is_alive() and registry.workers(DEPLOYMENT) == [] and transport.loads(DEPLOYMENT) == {}
    assert [r.completion_tokens for r in ledger.records] == [12]


class _StopsAtFirstToken(MemorySequences):
    """Tells its worker to stop as the worker emits its first token, and keeps each load the worker reports after."""

    def __init__(self):
        super().__init__()
        self.stop, self.draining = threading.Event(), []

    def emit(self, events, watch=()):
        cancelled = super().emit(events, watch)
        if events:
            self.stop.set()
        return cancelled

    def report(self, deployment_id, worker_id, load):
        if self.stop.is_set() and load is not None:
            self.draining.append(load)
        super().report(deployment_id, worker_id, load)


def test_a_stopped_worker_reports_at_once_that_it_has_no_free_rows(compiled):
    """While it drains, routing must send it nothing: a sequence routed to a worker that no longer takes any would
    wait out its grace before another worker took it."""
    hf, folder = compiled
    transport = _StopsAtFirstToken()
    worker = LanguageModelWorker(llm_spec(), transport, lambda key: folder / key, ListLedger(), MemoryRegistry(),
                                 "llm-w3")  # fmt: skip
    thread = threading.Thread(target=worker.run, args=(transport.stop,), daemon=True)
    thread.start()
    tokens = asyncio.run(asyncio.wait_for(tokens_of(submit(transport, [5, 6, 7], 40)), 120))
    thread.join(30)
    assert tokens == greedy_answer(hf, [5, 6, 7], 40) and not thread.is_alive()  # it finished what it held
    assert transport.draining, "it did not report while it drained"
    assert transport.draining[0].running + transport.draining[0].waiting == 1  # reported holding the sequence
    assert all(load.free_rows == 0 for load in transport.draining)


class _ReadyWatched(threading.Event):
    """A worker's `ready` event that notes, when set, the loads the transport holds then."""

    def __init__(self, transport):
        super().__init__()
        self.transport, self.loads_when_set = transport, None

    def set(self):
        self.loads_when_set = dict(self.transport.loads(DEPLOYMENT))
        super().set()


def test_it_reports_its_load_before_it_says_it_is_ready(compiled):
    """A sequence sent to a worker as soon as it is ready must find its load report: the transport lets any worker
    take a sequence whose preferred worker has none (as if it were gone), so the other worker could take it."""
    _, folder = compiled
    transport, stop = MemorySequences(), threading.Event()
    worker = LanguageModelWorker(llm_spec(), transport, lambda key: folder / key, ListLedger(), MemoryRegistry(),
                                 "llm-w4")  # fmt: skip
    worker.ready = _ReadyWatched(transport)
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    assert worker.ready.wait(120)
    stop.set()
    thread.join(30)
    assert "llm-w4" in worker.ready.loads_when_set
