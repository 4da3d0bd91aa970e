"""How long libgomp's team threads spin after a parallel region before they sleep, in a serving process.

Unset, libgomp spins 300,000 iterations (GOMP_SPINCOUNT's default) after each region, waiting for the next. In a
server the next region of a batch follows within microseconds, but the next batch only after the requests that
make it have been read, decoded and queued, by the event loop, which on a small machine needs the core the
spinning thread holds. With batching on (max batch 64, 5 ms delay), tritonclient's asyncio client at concurrency 8
got 0.66x the requests/s of one request at a time, the gateway spending 1.7 ms of CPU per request instead of 0.7;
with 10,000 it got 1.9x, at 0.38 ms per request (issue 48; bench/serve.py section d, 2 CPUs). 10,000 iterations
(tens of microseconds) still covers the gap between one batch's regions.
"""

from __future__ import annotations

import os

SERVING_SPINCOUNT = 10_000


def bound_openmp_spinning() -> None:
    """Applies SERVING_SPINCOUNT unless the operator chose a spin count or wait policy. Call it before the first
    compiled program loads (libgomp reads its environment once, when loaded); processes started later inherit it."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", str(SERVING_SPINCOUNT))
