"""Python's cyclic garbage collector in a long-running serving process (`luminal serve`, a worker process).

A full collection walks every object the process holds. In a gateway with FastAPI, SQLAlchemy, pydantic and
numpy loaded that is about 190,000 objects: 100 ms of CPU with the GIL held, about once a second under load
(bench/serve.py (b) at concurrency 64). Every request in flight waited for it, and the process spent a tenth of a
core on it. What the process loaded to serve (its modules, the app) lives as long as the process: frozen
(`gc.freeze`), it is never walked again, and a full collection took 1.3 ms. Garbage made afterwards is collected
as before. Programs loaded later are not frozen: one evicted from a worker's cache must be freed, and freezing
them too measured the same.

The young generations also fill faster than CPython's default threshold (700 allocations) suits a server, whose
every request allocates hundreds of objects: a gen-0 pass ran about 115 times a second; at SERVING_THRESHOLD it
runs 15 times less often, for about the same cost each.

Only a process's entry point settles it: a test process that starts many apps keeps the default collector.
"""

from __future__ import annotations

import gc

SERVING_THRESHOLD = 10_000  # allocations between gen-0 collections


def settle_serving_process() -> None:
    """Once started, from the entry point: free what is garbage now (about 100 ms in a gateway, before serving),
    freeze the rest, and raise the gen-0 threshold."""
    gc.collect()
    gc.freeze()
    young, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(young, SERVING_THRESHOLD), gen1, gen2)
