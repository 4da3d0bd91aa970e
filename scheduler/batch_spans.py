"""The worker's spans of an answered request, in the trace of the gateway span that queued it.

A batch serves requests of many traces, and a span has one parent; so each traced request gets its own copy of
the batch's spans (the same `luminal.batch.id` on each), which keeps every request's trace whole:

    luminal.queue_wait   enqueued (gateway clock) .. taken by this worker
    luminal.batch        taken .. answered: forming the batch, assembling, running, splitting, storing answers
      luminal.execute    the program's run (absent when the batch failed before or while running)

They are written once the answers are stored, with the times measured then, so tracing adds nothing to the
answer's latency. Enqueue times come from the gateway's wall clock: across machines the queue wait is only as
exact as their clocks agree (as `queue_seconds` in the usage records).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from luminal.scheduler import tracing
from luminal.scheduler.billing import UsageRecord
from luminal.scheduler.queues.base import Delivery
from luminal.scheduler.work import InferenceResult
from luminal.scheduler.worker_spec import WorkerSpec

QUEUE_WAIT, BATCH, EXECUTE = "luminal.queue_wait", "luminal.batch", "luminal.execute"


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def record_answered(
    spec: WorkerSpec,
    worker_id: str,
    completions: list[tuple[Delivery, InferenceResult]],
    usage: UsageRecord | None,  # the program run that answered them; None when nothing ran
    answered_at: float,  # wall-clock seconds when the answers were stored
) -> None:
    """The spans of each traced request among `completions` (nothing when tracing is off)."""
    tracer = tracing.tracer()
    if tracer is None:
        return
    for delivery, result in completions:
        request = delivery.request
        if not getattr(request, "trace", None):  # untraced, or an undecodable stand-in
            continue
        parent = tracing.parent_context(request.trace)
        taken = max(delivery.taken_at, request.enqueued_at)
        tracer.start_span(QUEUE_WAIT, parent, start_time=_ns(request.enqueued_at)).end(_ns(taken))
        batch = tracer.start_span(
            BATCH, parent, start_time=_ns(taken), attributes=_batch_attributes(spec, worker_id, result)
        )
        if not result.ok:
            batch.set_status(Status(StatusCode.ERROR, (result.error or "")[:200]))
        if usage is not None:
            inside = trace.set_span_in_context(batch, parent)
            tracer.start_span(EXECUTE, inside, start_time=_ns(usage.started_at)).end(_ns(usage.ended_at))
        # The run's end is its start plus a perf_counter duration: never let the clocks' drift put it past the batch.
        batch.end(_ns(max(answered_at, taken, usage.ended_at if usage is not None else taken)))


def _batch_attributes(spec: WorkerSpec, worker_id: str, result: InferenceResult) -> dict:
    attributes = {
        "luminal.deployment.id": spec.deployment_id,
        "luminal.model.name": spec.model,
        "luminal.model.version": spec.version,
        "luminal.worker.id": worker_id,
        "luminal.batch.size": result.batch_size,
        "luminal.request.id": result.request_id,
        "luminal.status": result.status,
    }
    if result.batch_id is not None:
        attributes["luminal.batch.id"] = result.batch_id
    return attributes
