"""A sequence for a LoRA adapter is queued only once a worker of its deployment reports holding the adapter.

An adapter added to a live deployment reaches its running workers through the board they read between rounds
(scheduler/live_adapters.py): for a moment after the add, none holds it, and a sequence routed then would fail on
whichever worker took it. So the request waits, a bounded time, for a live worker's report naming the adapter;
past it, or as soon as every live worker reports it could not load the adapter, the answer is a 503 naming the
adapter (and the workers' reason). With no live worker at all (scaled to zero, all starting) it is queued at once:
a worker that starts loads the deployment's adapters before it takes anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from luminal.gateway.openai_errors import OpenAIError
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.routing import is_live

# The longest a request waits for a newly added adapter to be loaded: workers read the board every 0.2 s and load
# an adapter in milliseconds, so this only runs out when they cannot (overloaded hosts, a lost Redis).
ADAPTER_WAIT_S = 10.0
POLL_S = 0.05  # between reads of the load reports (a cached view: a read costs nothing until a report changes)


async def await_adapter(
    sequences: SequenceTransport,
    deployment_id: int,
    adapter: str,
    limit_s: float = ADAPTER_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Return once a live worker of the deployment holds `adapter`, or none is live; OpenAIError 503 otherwise."""
    deadline = clock() + limit_s
    while True:
        loads = await asyncio.to_thread(sequences.recent_loads, deployment_id)
        now = time.time()  # reports carry wall-clock times
        live = [load for load in loads.values() if is_live(load, now)]
        if not live or any(adapter in dict(load.adapters) for load in live):
            return
        reasons = [dict(load.adapter_errors).get(adapter) for load in live]
        if all(reasons):
            raise OpenAIError(503, f"LoRA adapter {adapter!r} could not be loaded by this model's workers: "
                                   f"{reasons[0]}", "model")  # fmt: skip
        if clock() >= deadline:
            raise OpenAIError(503, f"LoRA adapter {adapter!r} is not loaded by any worker yet (waited {limit_s:g} s); "
                                   "try again shortly", "model")  # fmt: skip
        await asyncio.sleep(POLL_S)
