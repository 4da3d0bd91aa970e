"""The crash the per-request key exists for, step by step on both queues and both databases: a worker bills its
batch and dies before acknowledging it; another worker reclaims the requests, re-runs them in a new batch and
answers them. Each request is answered once and billed once, by the batch that ran first."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from luminal.batching.policy import BatchPolicy
from luminal.scheduler.batch_execution import BatchExecutor
from luminal.scheduler.ledger import SqlUsageLedger
from luminal.scheduler.work import OK, InferenceRequest
from luminal.scheduler.worker_spec import WorkerSpec
from tests.scheduler.ledger_world import PRICES, rows


class DiesBeforeAcknowledging:
    """A queue seen by a worker killed right after billing: its completions never happen."""

    def __init__(self, queue):
        self.queue = queue

    def complete(self, delivery, result) -> None:
        pass

    def complete_all(self, completions) -> None:
        pass


def executor(deployment_id: int, tenant_id: int, worker_id: str, queue, ledger) -> BatchExecutor:
    spec = WorkerSpec(deployment_id, tenant_id, "tiny", 1, "tiny.lprog", "cpu", 8, 5, 0, 2, {}, {})
    return BatchExecutor(spec, worker_id, "cpu", queue, ledger, None, BatchPolicy.from_deployment(8, 5))


def double(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"y": inputs["x"] * 2}


@pytest.mark.parametrize("attempts", [1, 3])
def test_a_request_reclaimed_after_its_batch_was_billed_is_billed_once(world, queue, gateway_loop, attempts):
    db, tenant_id, deployment_id = world
    ledger = SqlUsageLedger(db, PRICES)
    sent = [InferenceRequest(deployment_id, tenant_id, {"x": np.full((1, 4), i, np.float32)}) for i in range(3)]
    for request in sent:
        queue.submit(request, max_depth=10)
    taken = queue.take(deployment_id, "w1", max_items=3, wait_s=1)
    executor(deployment_id, tenant_id, "w1", DiesBeforeAcknowledging(queue), ledger).execute(double, taken)
    # Every later worker that reclaims them dies the same way but the last, which answers.
    for attempt in range(2, attempts + 2):
        survivor = attempt == attempts + 1
        reclaimed = queue.reclaim(deployment_id, f"w{attempt}", min_idle_s=0, max_items=10)
        assert sorted(d.request.id for d in reclaimed) == sorted(r.id for r in sent)
        target = queue if survivor else DiesBeforeAcknowledging(queue)
        for delivery in reclaimed:
            executor(deployment_id, tenant_id, f"w{attempt}", target, ledger).execute(double, [delivery])
    for request in sent:
        result = asyncio.run_coroutine_threadsafe(queue.wait_result(request.id, 5), gateway_loop).result(30)
        assert result.status == OK
        np.testing.assert_array_equal(result.outputs["y"], request.inputs["x"] * 2)
    records = rows(db)
    billed = [rid for r in records for rid in r.request_ids]
    assert sorted(billed) == sorted(r.id for r in sent)
    assert {r.worker_id for r in records} == {"w1"}  # the first run's bill stands
