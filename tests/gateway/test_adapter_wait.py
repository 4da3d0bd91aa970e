"""A sequence for a LoRA adapter waits, a bounded time, for a worker of its deployment to report holding the
adapter (gateway/adapter_wait.py): it goes on once one does or when no worker is live, and otherwise gets a 503
naming the adapter, at once when every live worker reports it could not load it."""

import asyncio
import threading
import time

import pytest

from luminal.gateway.adapter_wait import await_adapter
from luminal.gateway.openai_errors import OpenAIError
from luminal.scheduler.sequences.memory import MemorySequences
from luminal.scheduler.sequences.request import WorkerLoad

DEPLOYMENT = 3


def _load(adapters=(), errors=(), reported_at=None) -> WorkerLoad:
    held = tuple((a, f"lora:{i + 1}") for i, a in enumerate(adapters))
    when = time.time() if reported_at is None else reported_at
    return WorkerLoad(0, 0, 8, reported_at=when, adapters=held, adapter_errors=errors)


def test_with_no_live_worker_the_sequence_is_queued_at_once():
    sequences = MemorySequences()
    asyncio.run(await_adapter(sequences, DEPLOYMENT, "late", limit_s=0))
    sequences.report(DEPLOYMENT, "gone", _load(reported_at=time.time() - 60))  # stale: its worker is gone
    asyncio.run(await_adapter(sequences, DEPLOYMENT, "late", limit_s=0))


def test_it_waits_until_a_worker_reports_the_adapter():
    sequences = MemorySequences()
    sequences.report(DEPLOYMENT, "a", _load())
    sequences.report(DEPLOYMENT, "b", _load())
    later = threading.Timer(0.3, lambda: sequences.report(DEPLOYMENT, "b", _load(["late"])))
    later.start()
    started = time.monotonic()
    asyncio.run(await_adapter(sequences, DEPLOYMENT, "late", limit_s=10))
    assert time.monotonic() - started >= 0.25  # it did wait for the report
    later.join()


def test_past_its_bound_the_answer_is_a_503_naming_the_adapter():
    sequences = MemorySequences()
    sequences.report(DEPLOYMENT, "a", _load(["other"]))
    with pytest.raises(OpenAIError, match="'late' is not loaded by any worker yet") as refused:
        asyncio.run(await_adapter(sequences, DEPLOYMENT, "late", limit_s=0.2))
    assert refused.value.status == 503


def test_a_503_with_the_reason_once_every_live_worker_failed_to_load_it():
    sequences = MemorySequences()
    sequences.report(DEPLOYMENT, "a", _load(errors=(("late", "LoRA adapter: q_proj holds NaN or infinite values"),)))
    sequences.report(DEPLOYMENT, "b", _load())  # not read the board yet: the request waits for it
    with pytest.raises(OpenAIError, match="not loaded by any worker yet"):
        asyncio.run(await_adapter(sequences, DEPLOYMENT, "late", limit_s=0.2))
    sequences.report(DEPLOYMENT, "b", _load(errors=(("late", "LoRA adapter: q_proj holds NaN or infinite values"),)))
    started = time.monotonic()
    with pytest.raises(OpenAIError, match="'late' could not be loaded by this model's workers: .*NaN") as refused:
        asyncio.run(await_adapter(sequences, DEPLOYMENT, "late", limit_s=10))
    assert refused.value.status == 503 and time.monotonic() - started < 5
