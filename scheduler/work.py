"""What travels between the gateway and the workers: a queued inference request and its result.

Both are plain values, so every queue backend carries them the same way: the in-memory queue hands the objects
over, the Redis Streams queue encodes them (`scheduler/queues/codec.py`: raw array bytes, never pickle).
Times are wall-clock seconds (`time.time()`), since a request may be executed by a worker in another process
or on another machine; durations measured inside one process use the monotonic clock.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import numpy as np

# Priority levels as Triton numbers them: 1 is the most urgent; 0 (or none given) means the default level.
HIGHEST_PRIORITY = 1
LOWEST_PRIORITY = 10
DEFAULT_PRIORITY = 5


def new_request_id() -> str:
    return uuid.uuid4().hex


def effective_priority(priority: int | None) -> int:
    """The level a request is queued at; raises ValueError naming the accepted range."""
    if priority is None or priority == 0:
        return DEFAULT_PRIORITY
    if not HIGHEST_PRIORITY <= priority <= LOWEST_PRIORITY:
        raise ValueError(
            f"priority {priority} is out of range: use {HIGHEST_PRIORITY} (most urgent) to {LOWEST_PRIORITY}, "
            "or 0 for the default"
        )
    return priority


@dataclass
class InferenceRequest:
    deployment_id: int
    tenant_id: int
    inputs: dict[str, np.ndarray]
    priority: int = DEFAULT_PRIORITY  # 1 (most urgent) .. 10
    deadline: float | None = None  # wall-clock time by which execution must start; None: no deadline
    id: str = field(default_factory=new_request_id)
    enqueued_at: float = field(default_factory=time.time)
    # The W3C trace context (traceparent, tracestate) of the gateway span that queued it, so the worker's spans
    # join the caller's trace (scheduler/tracing.py); None when the request is not traced.
    trace: dict[str, str] | None = None

    def expired(self, now: float | None = None) -> bool:
        return self.deadline is not None and (time.time() if now is None else now) >= self.deadline


# Result statuses, as the gateway answers them over HTTP.
OK = 200
INVALID_INPUT = 400  # the inputs do not fit the program (shape, symbol range, index out of range)
FAILED = 500  # the batch failed for a reason that is not the request's fault
UNSCHEDULABLE = 503  # no worker can run its deployment's GPU type here; it was never queued, nothing billed
EXPIRED = 504  # the deadline passed before execution started; the request was never executed


@dataclass
class InferenceResult:
    request_id: str
    status: int
    outputs: dict[str, np.ndarray] | None = None
    error: str | None = None  # the reason, for any status but OK
    # How the request was served, for metrics and billing (zero when it was never executed).
    batch_id: str | None = None
    batch_size: int = 0  # requests in its batch
    batch_leader: bool = False  # exactly one request of each batch carries it, so the batch is counted once
    queue_seconds: float = 0.0  # from enqueue to the start of execution
    compute_seconds: float = 0.0  # the batch's execution time
    billed_seconds: float = 0.0  # this request's share of the batch's execution time
    worker_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK


def expired_result(request: InferenceRequest) -> InferenceResult:
    """The 504 answer of a request whose deadline passed before its execution started (it never runs)."""
    waited = time.time() - request.enqueued_at
    return InferenceResult(
        request.id,
        EXPIRED,
        error=f"the request's timeout passed before execution started (it waited {waited:.3f} s in the queue)",
        queue_seconds=waited,
    )
