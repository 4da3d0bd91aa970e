"""The recent failed inference requests of each deployment, kept in memory for the dashboard's failures list.

Bounded twice: at most `per_deployment` failures per deployment (the oldest drop first), and a message is cut
to MAX_MESSAGE_CHARS (a caller's bad body can make a long one). Deployments belong to one tenant, so a tenant's
failures are those of its own deployments' ids; nothing here needs the tenant."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class Failure:
    at: float  # epoch seconds
    deployment_id: int
    model: str
    version: str
    status: int  # the HTTP status the caller got
    reason: str  # the metrics' failure reason: rejected, expired, invalid, failed
    message: str
    request_id: str | None  # None when it failed before it was queued (a bad body, a full queue)


class FailureLog:
    def __init__(self, per_deployment: int = 50, clock: Callable[[], float] = time.time):
        self.per_deployment, self.clock = per_deployment, clock
        self._recent: dict[int, deque[Failure]] = {}
        self._counts: dict[int, int] = {}  # every failure ever recorded per deployment (the charts' error rate)
        # Failures are recorded from the event loop and from prediction tasks; readers copy under the lock.
        self._lock = threading.Lock()

    def record(
        self, deployment_id: int, model: str, version: str, status: int, reason: str, message: str,
        request_id: str | None = None,
    ) -> None:  # fmt: skip
        failure = Failure(
            self.clock(), deployment_id, model, version, status, reason, message[:MAX_MESSAGE_CHARS], request_id
        )
        with self._lock:
            self._recent.setdefault(deployment_id, deque(maxlen=self.per_deployment)).append(failure)
            self._counts[deployment_id] = self._counts.get(deployment_id, 0) + 1

    def counts(self) -> dict[int, int]:
        """How many failures each deployment has had since the gateway started, the ones dropped included."""
        with self._lock:
            return dict(self._counts)

    def recent(self, deployment_ids: Iterable[int], limit: int) -> list[Failure]:
        """The newest `limit` failures of these deployments, newest first."""
        with self._lock:
            found = [f for d in deployment_ids for f in self._recent.get(d, ())]
        return sorted(found, key=lambda f: f.at, reverse=True)[:limit]
