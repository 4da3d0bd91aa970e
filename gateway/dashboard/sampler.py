"""The dashboard's time series: every few seconds the gateway reads its own metrics and keeps, per deployment, a
bounded ring of points saying what happened since the reading before (request and error rates, latency
percentiles from the histogram's bucket deltas, the pending requests, a language model's tokens/s and time to
first token).

`sample()` is one step (tests call it to mark an interval, no clock to wait on); `run()` steps every
`interval_s` on the gateway's event loop. Each gateway samples its own metrics: with several replicas each
one's dashboard shows the traffic it answered. A deleted deployment's ring stays until the gateway restarts, as
its Prometheus series do (a ring is at most `max_points` small points)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from luminal.gateway.dashboard.readings import Buckets, buckets, difference, quantile, totals
from luminal.gateway.generation_metrics import GenerationMetrics
from luminal.gateway.metrics import InferenceMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Point:
    at: float  # epoch seconds at the end of the interval
    seconds: float  # the interval's length
    requests: int  # answered in the interval, failed ones included
    errors: int
    latency_p50_ms: float | None  # of the successful ones; None when none succeeded
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    pending: int  # queued or executing at the end of the interval
    # Language models only (None otherwise): tokens generated per second, sequences that got their first token.
    tokens_per_s: float | None = None
    sequences: int | None = None
    ttft_p50_ms: float | None = None
    ttft_p95_ms: float | None = None


@dataclass(frozen=True)
class _Reading:
    """The cumulative totals of every deployment at one moment."""

    at: float
    success: dict[int, float]
    failure: dict[int, int]
    latency: dict[int, Buckets]
    pending: dict[int, float]
    tokens: dict[int, float]
    first_token: dict[int, Buckets]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


class MetricsSampler:
    def __init__(
        self,
        metrics: InferenceMetrics,
        generation: GenerationMetrics,
        interval_s: float,
        max_points: int,
        clock: Callable[[], float] = time.time,
    ):
        self.metrics, self.generation, self.interval_s, self.max_points = metrics, generation, interval_s, max_points
        self.clock = clock
        self._last: _Reading | None = None
        self._points: dict[int, deque[Point]] = {}
        self._lock = threading.Lock()  # sample() may run in a test's thread while a route reads

    def _read(self) -> _Reading:
        m, g = self.metrics, self.generation
        return _Reading(
            # Failures from the failure log, not the Triton counter: it also holds a language model's.
            self.clock(), totals(m.success), m.failures.counts(), buckets(m.latency), totals(m.pending, ""),
            totals(g.generated_tokens), buckets(g.first_token),
        )  # fmt: skip

    def sample(self) -> None:
        """Read the metrics and add, for every deployment they name, a point covering the time since the last
        reading (the first reading only sets where the first interval starts)."""
        with self._lock:
            now, before = self._read(), self._last
            self._last = now
            if before is None or now.at <= before.at:
                return
            deployments = set(now.success) | set(now.failure) | set(now.pending) | set(now.first_token)
            for deployment_id in deployments:
                point = _point(deployment_id, before, now)
                self._points.setdefault(deployment_id, deque(maxlen=self.max_points)).append(point)

    def series(self, deployment_id: int, since: float) -> list[Point]:
        """The deployment's points ending after `since`, oldest first."""
        with self._lock:
            return [p for p in self._points.get(deployment_id, ()) if p.at > since]

    async def run(self) -> None:
        """Sample every interval until cancelled (started with the gateway)."""
        while True:
            try:
                self.sample()
            except Exception:  # a bug here must not stop the charts for good, nor anything else on the loop
                log.exception("dashboard sampling failed")
            await asyncio.sleep(self.interval_s)


def _point(d: int, before: _Reading, now: _Reading) -> Point:
    seconds = now.at - before.at
    ok = now.success.get(d, 0.0) - before.success.get(d, 0.0)
    failed = now.failure.get(d, 0.0) - before.failure.get(d, 0.0)
    latency = difference(now.latency[d], before.latency.get(d)) if d in now.latency else ()
    generation = {}
    if d in now.first_token:  # a language model's sequences were answered here
        first = difference(now.first_token[d], before.first_token.get(d))
        tokens = now.tokens.get(d, 0.0) - before.tokens.get(d, 0.0)
        generation = {
            "tokens_per_s": tokens / seconds,
            "sequences": round(first[-1][1]),
            "ttft_p50_ms": _ms(quantile(0.5, first)),
            "ttft_p95_ms": _ms(quantile(0.95, first)),
        }
    return Point(
        at=now.at,
        seconds=seconds,
        requests=round(ok + failed),
        errors=round(failed),
        latency_p50_ms=_ms(quantile(0.5, latency)),
        latency_p95_ms=_ms(quantile(0.95, latency)),
        latency_p99_ms=_ms(quantile(0.99, latency)),
        pending=round(now.pending.get(d, 0.0)),
        **generation,
    )
