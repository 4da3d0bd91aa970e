"""Inference metrics in Prometheus' text format, with Triton Inference Server's names and meanings, so dashboards
and alerts written for Triton read a Luminal gateway unchanged.

Every series is labelled `model` and `version` (as Triton) plus `deployment` (its id: two tenants may both name
a model "tiny"). Counters and durations count requests that reached a backend; a request refused before that
(unknown model, bad key) belongs to no model and is not counted. `nv_inference_count / nv_inference_exec_count`
is the average batch size: each executed request is one inference, and each batch is one execution, counted
once through the result that carries `batch_leader`.

The registry belongs to one `InferenceMetrics` (one per app), never prometheus_client's global one: tests build
many apps in one process, and a second app would otherwise find the names taken.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from luminal.gateway.failure_log import FailureLog
from luminal.scheduler.queues.base import QueueFull
from luminal.scheduler.work import EXPIRED, INVALID_INPUT, UNSCHEDULABLE, InferenceRequest, InferenceResult

if TYPE_CHECKING:  # the backend module imports nothing of ours; the annotation only names its types
    from luminal.gateway.inference_backend import DeploymentRef, InferenceBackend

# The version-0.0.4 text format: OpenMetrics would require counters to end in `_total`, Triton's names do not.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ("model", "version", "deployment")
TRITON_COUNTERS = frozenset(
    {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        # The language-model token counters (gateway/generation_metrics.py), named in the same style.
        "luminal_prompt_tokens",
        "luminal_generation_tokens",
    }
)

# Why a request failed, the `reason` label of nv_inference_request_failure.
REJECTED = "rejected"  # admission refused it: the deployment's queue was full (429)
EXPIRED_REASON = "expired"  # its timeout passed before it ran (504)
INVALID = "invalid"  # its body or inputs were wrong (4xx)
FAILED = "failed"  # the execution failed for a reason that is not the caller's (5xx)

# Latency buckets in seconds, from a small model on a warm worker (~1 ms) to a cold start (~1 min).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclass(frozen=True)
class ModelLabels:
    model: str
    version: str
    deployment: str  # the deployment's id

    @classmethod
    def of(cls, model: str, version: int | str, deployment_id: int) -> ModelLabels:
        return cls(model, str(version), str(deployment_id))

    def values(self) -> tuple[str, str, str]:
        return self.model, self.version, self.deployment


class _ModelSeries(NamedTuple):
    """One model's labelled series of the per-request metrics."""

    success: Any
    inferences: Any
    executions: Any
    request_us: Any
    queue_us: Any
    compute_us: Any
    latency: Any
    pending: Any


def failure_reason(status: int) -> str:
    """The failure reason of a request answered with HTTP `status`."""
    if status in (429, UNSCHEDULABLE):  # refused before admission, as a full queue refuses
        return REJECTED
    if status == EXPIRED:
        return EXPIRED_REASON
    if status == INVALID_INPUT or 400 <= status < 500:
        return INVALID
    return FAILED


class InferenceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r, labels = self.registry, LABELS
        self.success = Counter(
            "nv_inference_request_success",
            "Number of successful inference requests, all batch sizes",
            labels,
            registry=r,
        )
        self.failure = Counter(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes, by reason",
            (*labels, "reason"),
            registry=r,
        )
        self.inferences = Counter("nv_inference_count", "Number of inferences performed", labels, registry=r)
        self.executions = Counter(
            "nv_inference_exec_count", "Number of model executions performed (batches)", labels, registry=r
        )
        self.request_us = Counter(
            "nv_inference_request_duration_us",
            "Cumulative end-to-end duration of successful inference requests, in microseconds",
            labels,
            registry=r,
        )
        self.queue_us = Counter(
            "nv_inference_queue_duration_us",
            "Cumulative time successful requests waited in a queue before execution, in microseconds",
            labels,
            registry=r,
        )
        self.compute_us = Counter(
            "nv_inference_compute_infer_duration_us",
            "Cumulative execution time of the batches that served successful requests, in microseconds",
            labels,
            registry=r,
        )
        self.latency = Histogram(
            "luminal_inference_request_latency_seconds",
            "End-to-end latency of successful inference requests, in seconds",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.pending = Gauge(
            "nv_inference_pending_request_count",
            "Requests this gateway has handed to a backend and not yet had answered (queued or executing)",
            labels,
            registry=r,
        )
        # The recent failures with their messages, for the dashboard (counters keep only how many and why).
        self.failures = FailureLog()
        # Each model's labelled series, looked up once: `.labels()` validates and locks on every call, eight times
        # per request otherwise. Series are never removed, so a cached one stays the registry's.
        self._series: dict[ModelLabels, _ModelSeries] = {}

    def _of(self, labels: ModelLabels) -> _ModelSeries:
        series = self._series.get(labels)
        if series is None:
            values = labels.values()
            series = self._series[labels] = _ModelSeries(
                *(m.labels(*values) for m in (self.success, self.inferences, self.executions, self.request_us)),
                *(m.labels(*values) for m in (self.queue_us, self.compute_us, self.latency, self.pending)),
            )
        return series

    def record_result(self, labels: ModelLabels, result: InferenceResult, seconds: float) -> None:
        """Count a backend's answer; `seconds` is the request's end-to-end duration."""
        if not result.ok:
            self.record_failure(labels, result.status, result.error or "inference failed", result.request_id)
            return
        series = self._of(labels)
        series.success.inc()
        series.inferences.inc()
        if result.batch_leader:
            series.executions.inc()
        series.request_us.inc(max(seconds, 0.0) * 1e6)
        series.queue_us.inc(max(result.queue_seconds, 0.0) * 1e6)
        series.compute_us.inc(max(result.compute_seconds, 0.0) * 1e6)
        series.latency.observe(max(seconds, 0.0))

    def record_failure(self, labels: ModelLabels, status: int, message: str, request_id: str | None = None) -> None:
        """Count a request answered with error `status`, and keep it with its message among the recent failures."""
        self.failure.labels(*labels.values(), failure_reason(status)).inc()
        self.note_failure(labels, status, message, request_id)

    def note_failure(self, labels: ModelLabels, status: int, message: str, request_id: str | None = None) -> None:
        """Keep a failed request among the recent failures only: a language model's, which the Triton counters
        (requests that reached a tensor backend) do not count."""
        model, version, deployment = labels.values()
        self.failures.record(int(deployment), model, version, status, failure_reason(status), message, request_id)

    @contextmanager
    def pending_request(self, labels: ModelLabels) -> Iterator[None]:
        gauge = self._of(labels).pending
        gauge.inc()
        try:
            yield
        finally:
            gauge.dec()

    def exposition(self) -> bytes:
        return _triton_counter_names(generate_latest(self.registry).decode()).encode()


def _triton_counter_names(text: str, counters: frozenset[str] = TRITON_COUNTERS) -> str:
    """prometheus_client writes a counter `x` as `x_total` (OpenMetrics' convention) where Triton writes `x`, and
    adds an `x_created` gauge per counter and histogram, which Triton has not: rename the first, drop the second.
    No family of this registry is named `..._created` on purpose, so every such line is one of those gauges."""
    lines = []
    for line in text.splitlines():
        comment = line.startswith("# ")
        if comment:
            kind, name, rest = (line[2:].split(" ", 2) + [""])[:3]
        else:
            name, sep, rest = line.partition("{") if "{" in line else line.partition(" ")
        if name.endswith("_created"):
            continue
        base = name.removesuffix("_total")
        if base not in counters:
            lines.append(line)
        elif comment:
            lines.append(f"# {kind} {base} {rest}")
        else:
            lines.append(base + sep + rest)
    return "\n".join(lines) + "\n"


async def observed_infer(
    metrics: InferenceMetrics,
    labels: ModelLabels,
    backend: InferenceBackend,
    deployment: DeploymentRef,
    request: InferenceRequest,
) -> InferenceResult:
    """`backend.infer`, counted: the pending gauge while it runs, then its result (or the admission refusal,
    re-raised). The duration runs from the request's `enqueued_at`, so an asynchronous prediction's includes
    the time it waited for its background task."""
    with metrics.pending_request(labels):
        try:
            result = await backend.infer(deployment, request)
        except QueueFull as e:
            metrics.record_failure(labels, 429, str(e) or "the deployment's queue is full", request.id)
            raise
        except Exception as e:  # a backend bug or a lost worker: the caller gets a 500, the operator sees a failure
            metrics.record_failure(labels, 500, f"internal error ({type(e).__name__})", request.id)
            raise
    metrics.record_result(labels, result, time.time() - request.enqueued_at)
    return result
