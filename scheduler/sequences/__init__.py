"""How language-model sequences travel between the gateway and the workers holding the engines (base.py);
`open_sequences` picks the backend from the platform's queue URL, as `open_queue` does."""

from __future__ import annotations

from luminal.scheduler.queues import backend_of
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.memory import MemorySequences


def open_sequences(url: str | None, namespace: str = "lm") -> SequenceTransport:
    """In memory without a queue URL (the embedded default); on Redis with one (gateways and worker processes)."""
    if backend_of(url, namespace) == "memory":
        return MemorySequences()
    from luminal.scheduler.sequences.redis_sequences import RedisSequences  # imports redis only when asked for

    return RedisSequences(url.strip(), namespace)
