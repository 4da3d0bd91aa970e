"""How language-model sequences travel between the gateway and the workers holding the engines (base.py);
`open_sequences` picks the backend from the platform's queue URL, as `open_queue` does."""

from __future__ import annotations

from luminal.scheduler.queues import backend_of
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.memory import MemorySequences


def open_sequences(url: str | None, namespace: str = "lm", reader_lease_s: float | None = None) -> SequenceTransport:
    """In memory without a queue URL (the embedded default); on Redis with one (gateways and worker processes),
    where a gateway holds a lease of `reader_lease_s` on the sequences it relays (None: reader_lease.py's)."""
    if backend_of(url, namespace) == "memory":
        return MemorySequences()
    from luminal.scheduler.sequences.redis_sequences import RedisSequences  # imports redis only when asked for

    if reader_lease_s is None:
        return RedisSequences(url.strip(), namespace)
    return RedisSequences(url.strip(), namespace, reader_lease_s=reader_lease_s)
