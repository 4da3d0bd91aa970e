"""The tokens a language-model worker delivered before it died are billed by the gateway's relay (its worker never
will), under that worker's id and the deployment's GPU type, once: a late record of the worker's own bills
nothing more (scheduler/sequences/cut_short.py)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.generation.sampling import SamplingParams
from luminal.scheduler.generation.stream import Account, Delta, GenerationFailed
from luminal.scheduler.ledger import SqlUsageLedger
from luminal.scheduler.sequences.relay import RelayedStream
from luminal.scheduler.sequences.request import SequenceRequest
from tests.scheduler.ledger_world import PRICES, rows, usage
from tests.scheduler.test_sequence_transport import transport  # noqa: F401 (a fixture: memory and Redis)

DEPLOYMENT = 11


def sequence(account: Account | None = None) -> SequenceRequest:
    account = account or Account(uuid.uuid4().hex, DEPLOYMENT, 3, "h100", "tiny", 2)
    return SequenceRequest(account, (5, 6, 7), SamplingParams(max_tokens=8))


def _alive(worker_id: str, worker_started_at: float | None) -> bool:
    return worker_id != "dead"


def cut_by_death(sequences, s: SequenceRequest, bill, deployment_id: int = DEPLOYMENT) -> list[str]:
    """The texts a relay delivered of `s`, whose worker "dead" emitted two tokens and died."""
    sequences.submit(s, max_waiting=8)
    sequences.take(deployment_id, "dead", 1, 1.0)
    sequences.emit([(s.id, Delta("a", 1, None, compute_s=0.25)), (s.id, Delta("b", 2, None, compute_s=0.5))])
    relay = RelayedStream(sequences, s, _alive, watch_s=0.05, bill=bill)
    texts = []

    async def read():
        async for delta in relay:
            texts.append(delta.text)

    with pytest.raises(GenerationFailed, match="worker dead died"):
        asyncio.run(asyncio.wait_for(read(), 20))
    return texts


def test_the_tokens_a_dead_worker_delivered_are_billed_under_its_id_and_gpu_type(transport):  # noqa: F811
    s, billed = sequence(), []
    assert cut_by_death(transport, s, billed.append) == ["a", "b"]
    [record] = billed
    assert (record.batch_id, record.request_ids, record.worker_id, record.gpu_type) == (s.id, (s.id,), "dead", "h100")
    assert (record.prompt_tokens, record.completion_tokens, record.deployment_id) == (3, 2, DEPLOYMENT)
    assert record.billed_seconds <= min(0.5, record.ended_at - record.started_at)  # the worker's stamped share


def test_a_failing_bill_still_ends_the_stream_with_the_death(transport):  # noqa: F811
    def broken(record: UsageRecord):
        raise ConnectionError("the database went away")

    assert cut_by_death(transport, sequence(), broken) == ["a", "b"]


def test_a_cut_short_sequence_is_billed_once_in_the_ledger_even_when_its_worker_bills_it_too(transport, world):  # noqa: F811
    """The relay's record and a late one from the worker itself (it was only silent) bill the request once."""
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    s = sequence(Account(uuid.uuid4().hex, deployment_id, tenant_id, "h100", "tiny", 1))
    cut_by_death(transport, s, ledger.record, deployment_id)
    late = usage(tenant_id, deployment_id, worker_id="dead", request_ids=(s.id,), request_rows=(1,), batch_id=s.id,
                 completion_tokens=5)  # fmt: skip
    assert ledger.record(late) is False
    assert [(r.worker_id, r.gpu_type, r.completion_tokens, r.request_ids) for r in rows(db)] == [
        ("dead", "h100", 2, [s.id])
    ]
