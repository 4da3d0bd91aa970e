"""A lone request runs on its caller's thread when its deployment's worker thread is idle (the embedded platform).

Handed to a worker thread, a request costs two thread wake-ups: the worker's, out of its wait on the queue, and
the caller's (the gateway's event loop), when the result comes back. Each is a trip through the OS scheduler and
the GIL: tens of microseconds on an idle machine, milliseconds on a loaded one. At low load they buy nothing: an
idle worker takes a lone request and runs it alone, at once (`BatchFormer` waits for company only under load).
So when the deployment's worker is idle (waiting for a first request, holding nothing, executing nothing) and
nothing of the deployment is queued, the caller takes the request as that worker's consumer and executes it
itself, with the worker's executor: the same checks, billing (the ledger has the record before the result is
released) and result (stored in the queue, where `wait_result` finds it without waiting).

The caller is an event loop that serves nobody else while the program runs, so only a program whose latest run
took at most `max_run_s` is run this way, and the gateway asks only when it holds no other inference
(`gateway/scheduler_backend.py`). In-memory queues only: on Redis a request goes through its stream, so that it
survives the death of this process.
"""

from __future__ import annotations

import threading
from typing import Protocol

from luminal.scheduler.work import InferenceRequest


class IdleServer(Protocol):
    """A worker that can run a request on its caller's thread (scheduler/worker.py's `Worker`)."""

    deployment_id: int

    def may_serve_now(self, max_run_s: float) -> bool:
        """Whether it looks idle and quick enough now (a look, not a claim)."""
        ...

    def serve_now(self, request: InferenceRequest, max_run_s: float) -> bool:
        """Execute `request` on the calling thread if it is idle; whether it did (else nothing changed)."""
        ...


class CallerRuns:
    def __init__(self, max_run_s: float):
        # The longest program run an event loop may do in place of a worker thread: the most it delays the
        # other requests that reach it meanwhile. 0 hands every request to a worker thread.
        self.max_run_s = max_run_s
        self._servers: dict[int, tuple[IdleServer, ...]] = {}  # by deployment; replaced whole, read without a lock
        self._lock = threading.Lock()

    def add(self, server: IdleServer) -> None:
        with self._lock:
            self._servers[server.deployment_id] = (*self._servers.get(server.deployment_id, ()), server)

    def remove(self, server: IdleServer) -> None:
        with self._lock:
            left = tuple(s for s in self._servers.get(server.deployment_id, ()) if s is not server)
            if left:
                self._servers[server.deployment_id] = left
            else:
                self._servers.pop(server.deployment_id, None)

    def may_run(self, deployment_id: int) -> bool:
        """Whether a request of the deployment could run on its caller now: a cheap look, so that a caller pays
        for preparing (`run`'s checks) only where it may pay off."""
        if self.max_run_s <= 0:
            return False
        return any(s.may_serve_now(self.max_run_s) for s in self._servers.get(deployment_id, ()))

    def run(self, request: InferenceRequest) -> bool:
        """Execute `request` on this thread through an idle worker of its deployment: True when it ran (its result
        is in the queue); False, having changed nothing, when none is idle (then submit it as usual)."""
        if self.max_run_s <= 0:
            return False
        return any(s.serve_now(request, self.max_run_s) for s in self._servers.get(request.deployment_id, ()))
