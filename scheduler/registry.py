"""The worker registry: which workers serve which deployment, whether they are ready, and whether they are alive.

A worker registers when it starts, marks itself ready once its program is loaded (the time between is its cold
start), and heartbeats while it lives. The provisioner and the scheduler read it: `workers` to size pools and
route, `dead` to find workers whose heartbeats stopped, so their pending requests can be reclaimed from the
queue and the worker deregistered. `dead` only reports; deciding what to do is the caller's (policy apart from
mechanism). Times are wall-clock seconds, since workers run on other machines, read from the registry's clock
(the system's, or a test's that it steps).

Backends: `MemoryRegistry` (the embedded platform) and `RedisRegistry` (`registry_redis.py`), chosen by the same
URL as the queues (`open_registry`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from luminal.scheduler.queues import backend_of
from luminal.store.clock import SYSTEM_CLOCK, Clock


@dataclass
class WorkerInfo:
    worker_id: str
    deployment_id: int
    pid: int
    host: str
    device: str = "cpu"  # the GPU type it runs on ("cpu", "h100", ...): what its batches are billed as
    started_at: float = dataclasses.field(default_factory=time.time)  # when the worker process started
    ready_at: float | None = None  # when its program was loaded and it began taking requests; None: not yet
    last_heartbeat: float = 0.0  # set by the registry on register, mark_ready and heartbeat

    @property
    def cold_start_seconds(self) -> float | None:
        return None if self.ready_at is None else self.ready_at - self.started_at

    @property
    def ready(self) -> bool:
        return self.ready_at is not None

    def check(self) -> None:
        """Raises ValueError naming the first field that cannot be stored."""
        if not isinstance(self.worker_id, str) or not self.worker_id or len(self.worker_id) > 200:
            raise ValueError(f"worker_id must be a non-empty string of at most 200 characters, got {self.worker_id!r}")
        for name in ("deployment_id", "pid"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        if not isinstance(self.host, str):
            raise ValueError(f"host must be a string, got {self.host!r}")
        if not isinstance(self.device, str) or not self.device or len(self.device) > 32:
            raise ValueError(f"device must be a non-empty string of at most 32 characters, got {self.device!r}")


class UnknownWorker(KeyError):
    """The worker is not registered: never was, or was deregistered (for instance after being declared dead)."""

    def __init__(self, worker_id: str):
        super().__init__(f"worker {worker_id!r} is not registered")
        self.worker_id = worker_id

    def __str__(self) -> str:  # KeyError would print the message quoted
        return self.args[0]


class WorkerRegistry(Protocol):
    def register(self, info: WorkerInfo) -> None:
        """Adds the worker, or replaces a previous record with its id; registering counts as a heartbeat."""
        ...

    def mark_ready(self, worker_id: str) -> None:
        """Records that the worker is ready now; raises UnknownWorker."""
        ...

    def heartbeat(self, worker_id: str) -> None:
        """Records that the worker is alive now; raises UnknownWorker, so a worker deregistered as dead learns it
        and stops (its requests have been handed to others)."""
        ...

    def deregister(self, worker_id: str) -> None:
        """Removes the worker; removing one that is not registered is not an error."""
        ...

    def workers(self, deployment_id: int | None = None) -> list[WorkerInfo]:
        """Registered workers (of one deployment, or all), oldest first."""
        ...

    def dead(self, timeout_s: float) -> list[WorkerInfo]:
        """Workers whose last heartbeat is more than `timeout_s` seconds old, oldest heartbeat first."""
        ...

    def close(self) -> None: ...


class MemoryRegistry:
    def __init__(self, clock: Clock = SYSTEM_CLOCK):
        self.clock = clock
        self._lock = threading.Lock()
        self._workers: dict[str, WorkerInfo] = {}

    def register(self, info: WorkerInfo) -> None:
        info.check()
        with self._lock:
            self._workers[info.worker_id] = dataclasses.replace(info, last_heartbeat=self.clock.time())

    def mark_ready(self, worker_id: str) -> None:
        with self._lock:
            worker = self._get(worker_id)
            worker.ready_at = worker.last_heartbeat = self.clock.time()

    def heartbeat(self, worker_id: str) -> None:
        with self._lock:
            self._get(worker_id).last_heartbeat = self.clock.time()

    def deregister(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    def workers(self, deployment_id: int | None = None) -> list[WorkerInfo]:
        with self._lock:
            found = [w for w in self._workers.values() if deployment_id is None or w.deployment_id == deployment_id]
            return sorted((dataclasses.replace(w) for w in found), key=lambda w: (w.started_at, w.worker_id))

    def dead(self, timeout_s: float) -> list[WorkerInfo]:
        cutoff = self.clock.time() - timeout_s
        with self._lock:
            found = [dataclasses.replace(w) for w in self._workers.values() if w.last_heartbeat < cutoff]
        return sorted(found, key=lambda w: w.last_heartbeat)

    def close(self) -> None:
        pass

    def _get(self, worker_id: str) -> WorkerInfo:
        if worker_id not in self._workers:
            raise UnknownWorker(worker_id)
        return self._workers[worker_id]


def open_registry(url: str | None, namespace: str = "lm", clock: Clock = SYSTEM_CLOCK) -> WorkerRegistry:
    """The registry beside the queues of the same URL: '' or memory:// in-process, redis:// or rediss:// Redis."""
    if backend_of(url, namespace) == "memory":
        return MemoryRegistry(clock)
    from luminal.scheduler.registry_redis import RedisRegistry

    return RedisRegistry(url.strip(), namespace, clock)
