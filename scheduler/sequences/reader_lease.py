"""A gateway's lease on the sequences it relays, on Redis: a key with a TTL that a thread of the gateway renews. A
gateway killed (or cut off from Redis) stops renewing it; when it lapses, the workers running that gateway's
sequences drop them (nobody reads their tokens), which frees their cache blocks and bills only what was generated.
The other gateways' sequences run on: each holds its own lease.

The thread renews at a third of the TTL, so two renewals can be missed (a slow Redis call, a long pause of the
process) before a live gateway's sequences are dropped; a dropped sequence's reader, should it still be there,
gets the worker's failure event, never a hang.
"""

from __future__ import annotations

import logging
import threading

import redis

READER_LEASE_S = 10.0  # a dead gateway's sequences run at most this long (plus a worker step) before they are dropped
# (a gateway's is Settings.reader_lease_s)
log = logging.getLogger(__name__)


class ReaderLease:
    def __init__(self, client: redis.Redis, key: str, ttl_s: float = READER_LEASE_S):
        self.key, self.ttl_s = key, ttl_s
        self._redis = client
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def hold(self) -> None:
        """Make sure the lease is held and renewed (blocking: one Redis call the first time)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._renew()  # held before the first sequence can be taken
            self._thread = threading.Thread(target=self._keep, name=f"reader-lease-{self.key}", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop renewing and give the lease up: a gateway shutting down reads none of its sequences any more."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.ttl_s)
            self._redis.delete(self.key)

    def _keep(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self._renew()
            except redis.RedisError:  # the next renewal may get through before the lease lapses
                log.warning("renewing the reader lease %s failed", self.key, exc_info=True)

    def _renew(self) -> None:
        self._redis.set(self.key, 1, px=max(1, int(self.ttl_s * 1000)))
