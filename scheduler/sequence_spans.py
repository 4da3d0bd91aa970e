"""A language-model worker's spans of one traced sequence, in the trace of the gateway span that queued it.

Read from the events the worker emits (no hook in the engine): the first delta ends the prefill, each later one a
decode step of the batch then running. Written when the sequence ends, with the times seen then:

    luminal.sequence       the request's arrival (gateway clock) .. its last event
      luminal.queue_wait   arrival .. its prefill started (in the transport, then the engine's line); event "taken"
      luminal.prefill      prefill started .. first token
      luminal.decode       first token .. last: one event per decode step, with the batch size it ran in

Decode steps are span events, not spans: a 500-token answer would otherwise be 500 spans per sequence, each a
copy of one batched step. The SDK keeps a span's first 128 events (OTEL_SPAN_EVENT_COUNT_LIMIT raises it), so the
decode span also carries the step count and the largest and mean batch sizes of them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from luminal.scheduler import tracing
from luminal.scheduler.generation.stream import Delta, Event, Failed, TokenStream
from luminal.scheduler.sequences.base import is_last
from luminal.scheduler.sequences.request import SequenceRequest
from luminal.scheduler.worker_spec import WorkerSpec

SEQUENCE, QUEUE_WAIT, PREFILL, DECODE = "luminal.sequence", "luminal.queue_wait", "luminal.prefill", "luminal.decode"
DECODE_STEP = "decode_step"


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class SequenceSpans:
    """Watches one sequence's events (on the worker's thread) and writes its spans when it ends."""

    def __init__(
        self,
        request: SequenceRequest,
        stream: TokenStream,
        spec: WorkerSpec,
        worker_id: str,
        batch_rows: Callable[[], int],  # the rows of the decode step running now
    ):
        self.request, self.stream, self.spec, self.worker_id = request, stream, spec, worker_id
        self.batch_rows = batch_rows
        self.taken_at = time.time()
        self.first_token_at: float | None = None
        self.steps: list[tuple[float, int]] = []  # (wall-clock seconds, batch rows) of each decode step

    def saw(self, event: Event) -> None:
        now = time.time()
        if isinstance(event, Delta):
            if self.first_token_at is None:
                self.first_token_at = now
            else:
                self.steps.append((now, self.batch_rows()))
        if is_last(event):
            self._write(event, now)

    def _write(self, last: Event, ended: float) -> None:
        tracer = tracing.tracer()
        if tracer is None:
            return
        request, stream = self.request, self.stream
        arrived = min(request.arrived_at, self.taken_at)
        parent = tracing.parent_context(request.trace)
        sequence = tracer.start_span(SEQUENCE, parent, start_time=_ns(arrived), attributes=self._attributes(last))
        if isinstance(last, Failed):
            sequence.set_status(Status(StatusCode.ERROR, last.message[:200]))
        inside = trace.set_span_in_context(sequence, parent)
        prefill_at = stream.started_at if stream.started_at is not None else ended
        waiting = tracer.start_span(QUEUE_WAIT, inside, start_time=_ns(arrived))
        waiting.add_event("taken", {"luminal.worker.id": self.worker_id}, timestamp=_ns(self.taken_at))
        waiting.end(_ns(max(prefill_at, arrived)))
        if stream.started_at is not None and self.first_token_at is not None:
            tracer.start_span(PREFILL, inside, start_time=_ns(prefill_at)).end(_ns(self.first_token_at))
            self._decode(tracer, inside, ended)
        sequence.end(_ns(ended))

    def _decode(self, tracer: trace.Tracer, inside, ended: float) -> None:
        sizes = [rows for _, rows in self.steps]
        summary = {"luminal.decode.steps": len(sizes)}
        if sizes:
            summary |= {"luminal.batch.size.max": max(sizes), "luminal.batch.size.mean": sum(sizes) / len(sizes)}
        decode = tracer.start_span(DECODE, inside, start_time=_ns(self.first_token_at), attributes=summary)
        for at, rows in self.steps:
            decode.add_event(DECODE_STEP, {"luminal.batch.size": rows}, timestamp=_ns(at))
        decode.end(_ns(ended))

    def _attributes(self, last: Event) -> dict:
        attributes = {
            "luminal.request.id": self.request.id,
            "luminal.deployment.id": self.spec.deployment_id,
            "luminal.model.name": self.spec.model,
            "luminal.model.version": self.spec.version,
            "luminal.worker.id": self.worker_id,
            "luminal.prompt_tokens": self.stream.prompt_tokens,
            "luminal.completion_tokens": self.stream.completion_tokens,
        }
        if isinstance(last, Delta):
            attributes["luminal.finish_reason"] = last.finish_reason
        return attributes
