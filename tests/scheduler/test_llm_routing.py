"""Routing language-model sequences between two workers, each a LanguageModelWorker with its engine on a thread, on
each sequence transport (in memory; on Redis each worker and the gateway side with a client of their own, as
separate processes have): a prompt sharing a long prefix with one a worker served goes to that worker even when
it is the busier one, and its engine reuses the prefix (its cached blocks counted, not prefilled again, the answer
still transformers' greedy one); a prompt sharing nothing goes to the less loaded worker; a sequence routed to a
worker that stopped is served by the other (the transport tests show it is taken at once)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account
from luminal.scheduler.llm_worker import LanguageModelWorker
from luminal.scheduler.registry import MemoryRegistry
from luminal.scheduler.sequences.memory import MemorySequences
from luminal.scheduler.sequences.redis_sequences import RedisSequences
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest
from luminal.scheduler.sequences.routing import choose_worker
from tests.llm_folders import greedy_answer
from tests.scheduler.queue_fixtures import REDIS_URL, redis_namespace  # noqa: F401 (a fixture)
from tests.scheduler.test_llm_worker import DEPLOYMENT, compiled, llm_spec, tokens_of  # noqa: F401 (a fixture)
from tests.scheduler.test_worker import ListLedger

BLOCK = 16  # the package's KV block size (paged_decoding.DEFAULT_BLOCK_SIZE)
SHARED = [7 + (k * 5) % 40 for k in range(2 * BLOCK)]  # two full blocks both prompts start with
SLOW_ROUND_S = 0.05  # the busy worker's rounds are slowed so its long sequence is still running when others route


@pytest.fixture(params=["memory", "redis"])
def two_workers(request, compiled):  # noqa: F811 (the fixture above)
    """(hf model, gateway-side transport, {worker id: worker}, stops) with both workers running on threads."""
    hf, folder = compiled
    if request.param == "memory":
        shared = MemorySequences()
        transports = [shared, shared, shared]
    else:
        namespace = request.getfixturevalue("redis_namespace")
        transports = [RedisSequences(REDIS_URL, namespace) for _ in range(3)]
    registry, ledger = MemoryRegistry(), ListLedger()
    workers, stops, threads = {}, {}, []
    for worker_id, transport in zip(("w-a", "w-b"), transports[1:], strict=True):
        worker = LanguageModelWorker(llm_spec(), transport, lambda key: folder / key, ledger, registry, worker_id)
        stops[worker_id] = threading.Event()
        threads.append(threading.Thread(target=worker.run, args=(stops[worker_id],), daemon=True))
        threads[-1].start()
        workers[worker_id] = worker
    assert all(w.ready.wait(120) for w in workers.values())
    yield hf, transports[0], workers, stops
    for stop in stops.values():
        stop.set()
    for thread in threads:
        thread.join(30)
    for transport in set(transports):
        transport.close()


def submit(transport, prompt: list[int], max_tokens: int, preferred: str | None) -> RelayedStream:
    account = Account(uuid.uuid4().hex, DEPLOYMENT, 1, "cpu", "tiny", 1)
    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    request = SequenceRequest(account, tuple(prompt), params, timeout_s=60, preferred_worker=preferred)
    transport.submit(request, max_waiting=16)
    return RelayedStream(transport, request)


def routed(transport, prompt: list[int], max_tokens: int) -> RelayedStream:
    """Submitted as the gateway does: to the worker routing.choose_worker picks from the reports."""
    preferred = choose_worker(prompt, transport.loads(DEPLOYMENT), transport.backlog(DEPLOYMENT))
    return submit(transport, prompt, max_tokens, preferred)


def answer(relay: RelayedStream) -> list[int]:
    return asyncio.run(asyncio.wait_for(tokens_of(relay), 60))


def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def test_a_shared_prefix_goes_to_its_worker_and_is_reused_the_rest_to_the_less_loaded(two_workers):
    hf, transport, workers, _ = two_workers
    holder, other = workers["w-a"], workers["w-b"]
    first = SHARED + [3, 4, 5, 6, 7, 8, 9, 10]
    served = submit(transport, first, 4, "w-a")
    assert answer(served) == greedy_answer(hf, first, 4) and served.worker_id == "w-a"

    # w-a gets busier than w-b: a long sequence on rounds slowed down, reported running.
    fast_round = holder.engine.run_once
    holder.engine.run_once = lambda: (time.sleep(SLOW_ROUND_S), fast_round())[1]
    busy = submit(transport, [60 + k % 9 for k in range(20)], 40, "w-a")
    wait_for(lambda: transport.loads(DEPLOYMENT)["w-a"].running == 1, "w-a reports its long sequence running")
    reused_before = holder.engine.batch.pool.reused_tokens

    follow_up = SHARED + [11, 12, 13, 14, 15, 16]
    unrelated = [90 + k % 7 for k in range(2 * BLOCK + 6)]
    same_prefix, fresh = routed(transport, follow_up, 6), routed(transport, unrelated, 6)
    assert same_prefix.request.preferred_worker == "w-a" and fresh.request.preferred_worker == "w-b"
    assert answer(same_prefix) == greedy_answer(hf, follow_up, 6) and same_prefix.worker_id == "w-a"
    assert answer(fresh) == greedy_answer(hf, unrelated, 6) and fresh.worker_id == "w-b"
    assert holder.engine.batch.pool.reused_tokens - reused_before == 2 * BLOCK  # the shared blocks, not prefilled
    assert other.engine.batch.pool.reused_tokens == 0
    assert len(answer(busy)) == 40


def test_a_sequence_routed_to_a_stopped_worker_is_served_by_another(two_workers):
    hf, transport, workers, stops = two_workers
    stops["w-b"].set()
    wait_for(lambda: "w-b" not in transport.loads(DEPLOYMENT), "w-b leaves the load reports")
    prompt = SHARED[:10]
    stranded = submit(transport, prompt, 3, "w-b")
    assert answer(stranded) == greedy_answer(hf, prompt, 3) and stranded.worker_id == "w-a"
