"""Request queues between the gateway and the workers; `open_queue` picks the backend from a URL.

The interface is in `base.py`; `memory.py` is the embedded default, `redis_streams.py` the distributed backend.
"""

from __future__ import annotations

import re

from luminal.scheduler.queues.base import Delivery, QueueFull, RequestQueue, ResultTimeout

__all__ = ["Delivery", "QueueFull", "RequestQueue", "ResultTimeout", "backend_of", "open_queue"]

MEMORY_SCHEMES = ("", "memory://")
REDIS_SCHEMES = ("redis://", "rediss://")
# Every Redis key starts with the namespace; keep it to characters that cannot be mistaken for a key separator.
_NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def backend_of(url: str | None, namespace: str = "lm") -> str:
    """'memory' or 'redis' for a queue URL; ValueError naming the accepted forms for anything else."""
    if not _NAMESPACE.fullmatch(namespace or ""):
        raise ValueError(f"namespace {namespace!r} must be 1 to 64 letters, digits, '_', '.' or '-'")
    url = (url or "").strip()
    if url in MEMORY_SCHEMES:
        return "memory"
    if url.startswith(REDIS_SCHEMES):
        return "redis"
    raise ValueError(
        f"queue URL {url!r} is not supported: use an empty value or memory:// (in-process queues), "
        "or redis://host:port/db or rediss://... (Redis Streams)"
    )


def open_queue(url: str | None, namespace: str = "lm") -> RequestQueue:
    if backend_of(url, namespace) == "memory":
        from luminal.scheduler.queues.memory import MemoryQueue

        return MemoryQueue()
    from luminal.scheduler.queues.redis_streams import RedisStreamsQueue  # imports redis only when asked for

    return RedisStreamsQueue(url.strip(), namespace)
