"""How language-model sequences travel between the gateway and the workers holding the engines (base.py)."""

from __future__ import annotations

from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.sequences.memory import MemorySequences


def open_sequences(url: str | None, namespace: str = "luminal") -> SequenceTransport:
    """The transport of a platform: in memory without a queue URL (the embedded default)."""
    if url:
        raise ValueError(f"no sequence transport for {url!r} yet: language models are served in memory only")
    return MemorySequences()
