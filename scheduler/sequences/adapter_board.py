"""The LoRA adapters added to live language-model deployments, as their running workers learn of them: the gateway
that adds (or removes) one posts it on its deployment's board, and each worker reads the board between rounds
(live_adapters.py), fetches the adapter's factors from the artifact store and loads them.

One entry per adapter (name -> artifact key of its factors), so two gateways adding different adapters at once
never overwrite each other. `adapters` is None while nothing was ever posted for the deployment (a Redis that
restarted, say): a worker then keeps what it holds rather than taking the empty board for "remove them all".
The metadata store stays the record; workers started later read the deployment's adapters from their spec.
"""

from __future__ import annotations

import threading
from typing import Protocol

import redis

# A field no adapter can be named (names are checked: lora_package.check_adapter_name), kept in every board so a
# board whose last adapter was removed still exists (an empty board, not a missing one).
_POSTED = "."
_MAX_KEY_CHARS = 1024  # an artifact key is a short hash path; a longer value on a shared Redis is not ours


class AdapterBoard(Protocol):
    def post(self, deployment_id: int, name: str, artifact_key: str | None) -> None:
        """Announce adapter `name` with the artifact key of its factors; None: it was removed."""
        ...

    def adapters(self, deployment_id: int) -> dict[str, str] | None:
        """{adapter name: artifact key} as posted; None when nothing ever was."""
        ...


class MemoryAdapterBoard:
    """The embedded default's: the gateway and its worker threads share one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._boards: dict[int, dict[str, str]] = {}

    def post(self, deployment_id: int, name: str, artifact_key: str | None) -> None:
        with self._lock:
            board = self._boards.setdefault(deployment_id, {})
            if artifact_key is None:
                board.pop(name, None)
            else:
                board[name] = artifact_key

    def adapters(self, deployment_id: int) -> dict[str, str] | None:
        with self._lock:
            board = self._boards.get(deployment_id)
            return None if board is None else dict(board)


class RedisAdapterBoard:
    """A hash per deployment on the transport's Redis, read by worker processes on any machine."""

    def __init__(self, client: redis.Redis, namespace: str):
        self._redis, self._ns = client, namespace

    def _key(self, deployment_id: int) -> str:
        return f"{self._ns}:seq:adapters:{deployment_id}"

    def post(self, deployment_id: int, name: str, artifact_key: str | None) -> None:
        key = self._key(deployment_id)
        with self._redis.pipeline() as pipe:
            pipe.hset(key, _POSTED, "")
            if artifact_key is None:
                pipe.hdel(key, name)
            else:
                pipe.hset(key, name, artifact_key)
            pipe.execute()

    def adapters(self, deployment_id: int) -> dict[str, str] | None:
        """Entries that do not decode, or are too long to be an artifact key, are skipped: a shared Redis is
        read as hostile, and a worker must not fail on what another wrote there."""
        entries = self._redis.hgetall(self._key(deployment_id))
        if not entries:
            return None
        board = {}
        for name, key in entries.items():
            try:
                name, key = name.decode(), key.decode()
            except UnicodeDecodeError:
                continue
            if name != _POSTED and 0 < len(key) <= _MAX_KEY_CHARS:
                board[name] = key
        return board
