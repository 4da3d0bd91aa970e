"""Timing helpers shared by the benchmarks: medians over repeated runs, anchors side by side."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def median_ms(fn: Callable[[], object], repeats: int = 10, warmup: int = 2, budget_s: float = 20.0) -> float:
    """Median wall time of `fn` in milliseconds (fewer repeats if the budget runs out: the machine is shared)."""
    for _ in range(warmup):
        fn()
    times = []
    deadline = time.perf_counter() + budget_s
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
        if time.perf_counter() > deadline and len(times) >= 3:
            break
    return statistics.median(times)


def interleaved_ms(fns: dict[str, Callable[[], object]], repeats: int = 10, warmup: int = 2) -> dict[str, float]:
    """Median wall time of each function in milliseconds, the functions called in turn within every repeat: on a
    shared machine each sees the same background load, so their ratio holds even when the absolute times drift."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def synced_median_ms(
    fn: Callable[[], object], sync: Callable[[], object], samples: int = 15, inner: int = 10, warmup: int = 3
) -> float:
    """Median milliseconds per call of an asynchronous `fn` (a GPU launch): each sample issues `inner` calls
    back to back and waits for the device once (`sync`, e.g. torch.cuda.synchronize), so the time is what a
    stream of calls costs, not the host's wait after each."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3 / inner)
    return statistics.median(times)
