"""Reading the gateway's Prometheus metrics per deployment, and latency percentiles from histogram buckets.

A reading is a cumulative total, as Prometheus keeps it; the sampler subtracts two readings to get what happened
between them. Every series carries a `deployment` label (gateway/metrics.py), summed over its other labels
(a failure's reason)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending; the last bound is +Inf


def totals(metric: Any, suffix: str = "_total") -> dict[int, float]:
    """Counter (or gauge, with suffix "") values per deployment id."""
    found: dict[int, float] = defaultdict(float)
    for family in metric.collect():
        for s in family.samples:
            if s.name == family.name + suffix:
                found[int(s.labels["deployment"])] += s.value
    return dict(found)


def buckets(histogram: Any) -> dict[int, Buckets]:
    """A histogram's cumulative bucket counts per deployment id."""
    found: dict[int, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for family in histogram.collect():
        for s in family.samples:
            if s.name == family.name + "_bucket":
                found[int(s.labels["deployment"])][float(s.labels["le"])] += s.value
    return {d: tuple(sorted(counts.items())) for d, counts in found.items()}


def difference(now: Buckets, before: Buckets | None) -> Buckets:
    """The observations between two readings of one histogram (bounds never change, so they pair up)."""
    if before is None:
        return now
    return tuple((bound, count - old) for (bound, count), (_, old) in zip(now, before, strict=True))


def quantile(q: float, counts: Buckets) -> float | None:
    """The q-quantile of the observations counted in `counts`, interpolated linearly inside its bucket as
    Prometheus' histogram_quantile does (the first bucket starts at 0); None with no observations. An answer in
    the +Inf bucket is the largest finite bound: all a histogram can say is that it is above that."""
    if not counts or counts[-1][1] <= 0:
        return None
    rank = q * counts[-1][1]
    lower, below = 0.0, 0.0
    for bound, cumulative in counts:
        if cumulative >= rank and cumulative > below:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (cumulative - below)
        lower, below = bound, cumulative
    return lower
