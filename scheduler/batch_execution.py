"""One formed batch through the compiled program: grouped, concatenated, run, split, billed, answered.

Without a ledger (a worker process on Redis), the batch's usage record goes to the queue with its answers, in
one atomic step, and a drainer moves it into the database off the answer path (`scheduler/usage_drainer.py`).
With one, the record is handed to the ledger before any result is released: thread workers inside the gateway
hand it to a `BufferedLedger`, which journals it to disk at once, writes it off the serving path and whose
`flush()` makes it visible to a usage report. Each delivery is then completed (result stored, then
acknowledged), so a worker killed in between leaves its requests billed but pending: the worker that reclaims
and re-runs them is not billed for them again (the ledger keys requests by id).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from luminal.batching.assemble import assemble, padded_runs, split
from luminal.batching.layout import BatchLayout
from luminal.batching.policy import BatchPolicy
from luminal.scheduler import batch_spans, tracing
from luminal.scheduler.billing import UsageLedger, UsageRecord
from luminal.scheduler.programs import InvalidInput
from luminal.scheduler.queues.base import Delivery, RequestQueue
from luminal.scheduler.work import FAILED, INVALID_INPUT, OK, InferenceRequest, InferenceResult, expired_result
from luminal.scheduler.worker_spec import WorkerSpec

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 2000

RunProgram = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
# One program run: its requests' results, and its usage record (None when it failed and bills nothing).
_Step = tuple[list[tuple[InferenceRequest, InferenceResult]], UsageRecord | None]


@dataclass
class BatchExecutor:
    spec: WorkerSpec
    worker_id: str
    device: str  # the GPU type the worker runs on: billed, rather than the type the deployment asked for
    queue: RequestQueue
    ledger: UsageLedger | None  # None: the queue stores each batch's usage record with its answers
    layout: BatchLayout | None
    policy: BatchPolicy

    def execute(self, run: RunProgram, deliveries: list[Delivery]) -> None:
        by_id = {d.request.id: d for d in deliveries}
        now = time.time()
        # A request held for a later batch (or reclaimed) may have passed its deadline since it was taken.
        expired = [d for d in deliveries if d.request.expired(now)]
        if expired:
            self._answer([(d, expired_result(d.request)) for d in expired], None)
        requests = [d.request for d in deliveries if not d.request.expired(now)]
        groups = padded_runs(requests, self.layout) if self.layout is not None else [[r] for r in requests]
        for group in groups:
            for answered, record in self._run_group(run, group):  # one step per program run: one Redis round trip
                self._answer([(by_id[request.id], result) for request, result in answered], record)

    def _answer(self, completions: list[tuple[Delivery, InferenceResult]], record: UsageRecord | None) -> None:
        """Bill and answer one program run's requests (`record` None: nothing ran), then trace them."""
        if record is not None and self.ledger is None:
            self.queue.complete_all(completions, usage=record)  # the answers and their bill, atomically
        else:
            if record is not None:
                self._bill(record)
            self.queue.complete_all(completions)
        if tracing.enabled():
            batch_spans.record_answered(self.spec, self.worker_id, completions, record, time.time())

    def _bill(self, record: UsageRecord) -> None:
        try:
            self.ledger.record(record)
        except Exception:  # a bad record is our bug: the requests were served, so they still get their answers
            log.exception("deployment %s: usage record of batch %s refused: %r",
                          self.spec.deployment_id, record.batch_id, record)  # fmt: skip

    def _runs_alone(self, request: InferenceRequest) -> bool:
        """Not batchable: the program has no batch axis, or the request's inputs disagree on their rows (the
        program itself then says what is wrong with them)."""
        if self.layout is None or self.layout.rows_of(request) is None:
            return True
        padding = self.layout.padding
        return padding is not None and padding.lengths_of(request) is None

    def _rows(self, request: InferenceRequest) -> int:
        rows = None if self.layout is None else self.layout.rows_of(request)
        return 1 if rows is None else rows

    def _each_alone(self, run: RunProgram, group: list[InferenceRequest]) -> list[_Step]:
        return [step for request in group for step in self._run_group(run, [request])]

    def _run_group(self, run: RunProgram, group: list[InferenceRequest]) -> list[_Step]:
        """Per program run, each of its requests' results and its usage record (None when nothing ran)."""
        if len(group) > 1 and any(self._runs_alone(r) for r in group):
            return self._each_alone(run, group)
        alone = self._runs_alone(group[0])
        started, t0 = time.time(), time.perf_counter()
        try:
            if alone:
                per_request = [run(group[0].inputs)]
            else:
                batch = assemble(group, self.layout, self.policy.buckets)
                per_request = split(batch, run(batch.inputs))
        except InvalidInput as e:
            if len(group) > 1:
                # One request's bad values (an index out of range) must not fail its neighbours: run each alone.
                return self._each_alone(run, group)
            return [([(group[0], InferenceResult(group[0].id, INVALID_INPUT, error=str(e)[:MAX_ERROR_CHARS]))], None)]
        except Exception as e:  # the program or the batch contract broke: every request of the batch learns why
            log.exception("deployment %s: batch of %d failed", self.spec.deployment_id, len(group))
            reason = f"the batch failed: {type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
            return [([(r, InferenceResult(r.id, FAILED, error=reason)) for r in group], None)]
        seconds = time.perf_counter() - t0
        record = UsageRecord(
            batch_id=uuid.uuid4().hex,
            deployment_id=self.spec.deployment_id,
            tenant_id=self.spec.tenant_id,
            worker_id=self.worker_id,
            gpu_type=self.device,
            started_at=started,
            ended_at=started + seconds,
            request_ids=tuple(r.id for r in group),
            request_rows=tuple(self._rows(r) for r in group),
            model_name=self.spec.model,
            model_version=self.spec.version,
        )
        shares = record.shares()
        answered = [
            (
                request,
                InferenceResult(
                    request.id,
                    OK,
                    outputs,
                    batch_id=record.batch_id,
                    batch_size=len(group),
                    batch_leader=i == 0,
                    queue_seconds=max(0.0, started - request.enqueued_at),
                    compute_seconds=seconds,
                    billed_seconds=shares[request.id],
                    worker_id=self.worker_id,
                ),
            )
            for i, (request, outputs) in enumerate(zip(group, per_request))
        ]
        return [(answered, record)]
