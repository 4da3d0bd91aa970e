"""The sequence transport: how language-model sequences go from the gateway to the workers that hold the engines,
and how their events come back.

Gateway side: `submit` (admission: raises EngineBusy, a 429, when the deployment's waiting line is full, never
waits), `events` (the sequence's events as they come: Started naming the worker that took it, then its deltas,
ending with the last delta or a failure), `cancel` (the client went away), `abandon` (its worker died).
A sequence may name the worker it was routed to (routing.py): that worker may take it at once, any other only
after PREFERENCE_GRACE_S, or at once when that worker is gone from the load reports or has more waiting for it
than free rows; so a preference never strands a sequence.
Worker side: `take` (the next sequences it may take, most urgent first and in arrival order within a level,
each one's reader told in the same step which worker took it, with Started; those whose waiting deadline passed
are ended with Expired and never returned), `emit` (a step's events of many sequences at once, reading the
cancels of the others in the same call), `cancelled` (which of its sequences' clients went away), `report` (its
load, each heartbeat). `depth` and `in_flight` are the deployment's load, for the autoscaler; `loads` its workers'
reports (`recent_loads` the same through a cached view, load_view.py, which routing reads per request), `backlog`
the sequences waiting for each worker.
`adapters` is the board where gateways post the LoRA adapters added to or removed from a live deployment and its
workers read them (adapter_board.py).
Backends: `MemorySequences` (the embedded default, one process) and `RedisSequences` (gateways and worker
processes on a shared Redis); the same contract tests run on each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Protocol

from luminal.scheduler.generation.stream import Delta, Event, Failed
from luminal.scheduler.sequences.adapter_board import AdapterBoard
from luminal.scheduler.sequences.request import SequenceRequest, WorkerLoad


def is_last(event: Event) -> bool:
    """Whether nothing follows `event` on its sequence: its last delta, or a failure."""
    return isinstance(event, Failed) or (isinstance(event, Delta) and event.finish_reason is not None)


class SequenceTransport(Protocol):
    adapters: AdapterBoard  # the LoRA adapters posted for live deployments' workers

    # --- gateway side ---
    def submit(self, request: SequenceRequest, max_waiting: int) -> None:
        """Queue the sequence in its deployment's waiting line (bounded by `max_waiting`) or raise EngineBusy."""
        ...

    def events(self, request_id: str) -> AsyncIterator[Event]:
        """The sequence's events, in order, until its last one; read once, by the gateway that submitted it."""
        ...

    def cancel(self, request_id: str) -> None:
        """Its client went away: a waiting sequence is dropped, a running one is dropped by its worker before its
        next step. Idempotent, and harmless for a sequence that already ended."""
        ...

    def abandon(self, request: SequenceRequest, reason: str) -> None:
        """The worker running the sequence died: end it with Failed(`reason`) on its worker's behalf, and no longer
        count it in flight (a dead worker never ends it itself)."""
        ...

    def depth(self, deployment_id: int) -> int:
        """Sequences waiting for a worker."""
        ...

    def in_flight(self, deployment_id: int) -> int:
        """Sequences taken by a worker and not yet ended."""
        ...

    def loads(self, deployment_id: int) -> dict[str, WorkerLoad]:
        """The last load each of the deployment's live workers reported, by worker id."""
        ...

    def recent_loads(self, deployment_id: int) -> Mapping[str, WorkerLoad]:
        """`loads` as a copy no older than the newest report published, nor than load_view.MAX_AGE_S."""
        ...

    def backlog(self, deployment_id: int) -> dict[str, int]:
        """Waiting sequences routed to each worker (`SequenceRequest.preferred_worker`), by worker id."""
        ...

    # --- worker side ---
    def take(
        self, deployment_id: int, worker_id: str, max_items: int, wait_s: float, worker_started_at: float | None = None
    ) -> list[SequenceRequest]:
        """Up to `max_items` sequences, waiting up to `wait_s` for the first. Each one's `Started` event names the
        worker and `worker_started_at`, its registration's started_at (stream.Started: which process took it)."""
        ...

    def emit(self, events: list[tuple[str, Event]], watch: Iterable[str] = ()) -> set[str]:
        """(request id, event) pairs, in order: one step's events in one call, which also reads which of `watch`
        (the sequences still running) were cancelled, as `cancelled` does, and returns them."""
        ...

    def cancelled(self, request_ids: Iterable[str]) -> set[str]:
        """Which of `request_ids` were cancelled."""
        ...

    def report(self, deployment_id: int, worker_id: str, load: WorkerLoad | None) -> None:
        """The worker's load now (None: it is stopping, forget it)."""
        ...

    def close(self) -> None: ...
