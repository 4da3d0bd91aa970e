"""What routing reads of a deployment's load reports: a copy kept per deployment, so a burst of requests costs one
read of the reports, not one per request (on Redis a read is a hash of JSON reports of up to ~40 KB each, every
field decoded and checked: milliseconds per decision with a few workers).

A copy is read again once it is older than `max_age_s`, or once a report newer than it was published (the transport
says so with `published`: at once in process, from a pub/sub message on Redis). So it lags the workers by at most
one report, as reading them per request did, or by `max_age_s` should a notice be lost. Routing's meaning is
unchanged: a report's liveness is still judged on its own `reported_at` against the router's clock.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from luminal.scheduler.sequences.request import WorkerLoad

# The longest a copy is used without a notice of a newer report (should one be lost): workers report each heartbeat
# (1 s apart), so a lost notice delays routing on a newer report by at most one heartbeat.
MAX_AGE_S = 1.0


@dataclass(frozen=True)
class _Copy:
    loads: Mapping[str, WorkerLoad]
    read_at: float  # the view's clock when the read began
    published: int  # the deployment's count of published reports when the read began


class LoadView:
    def __init__(
        self,
        read: Callable[[int], dict[str, WorkerLoad]],  # the transport's read of a deployment's reports (blocking)
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._read, self.max_age_s, self.clock = read, max_age_s, clock
        self._lock = threading.Lock()  # guards the dicts below
        self._copies: dict[int, _Copy] = {}
        self._published: dict[int, int] = defaultdict(int)  # reports published per deployment, as told
        self._reading: dict[int, threading.Lock] = defaultdict(threading.Lock)  # one read per deployment at a time
        self.reads = 0  # reads of the transport so far (what the view saves is requests minus this)

    def loads(self, deployment_id: int) -> Mapping[str, WorkerLoad]:
        """The deployment's reports by worker id (read-only: shared with every caller until the next read)."""
        copy = self._fresh(deployment_id)
        if copy is not None:
            return copy.loads
        with self._lock:
            reading = self._reading[deployment_id]
        with reading:  # a burst's concurrent misses wait for the first one's read instead of each reading
            copy = self._fresh(deployment_id)
            if copy is not None:
                return copy.loads
            with self._lock:
                started, published = self.clock(), self._published[deployment_id]
            loads = MappingProxyType(self._read(deployment_id))
            with self._lock:
                self._copies[deployment_id] = _Copy(loads, started, published)
                self.reads += 1
            return loads

    def published(self, deployment_id: int) -> None:
        """A worker of the deployment published a report (or withdrew its own): the next `loads` reads again."""
        with self._lock:
            self._published[deployment_id] += 1

    def _fresh(self, deployment_id: int) -> _Copy | None:
        with self._lock:
            copy = self._copies.get(deployment_id)
            if copy is None or copy.published != self._published[deployment_id]:
                return None
            return copy if self.clock() - copy.read_at < self.max_age_s else None
