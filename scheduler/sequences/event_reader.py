"""One blocking XREAD for all the sequences a gateway's event loop relays, in place of one per sequence.

Each sequence's events are a Redis stream of their own (redis_sequences.py). Read one XREAD per sequence, a gateway
relaying 16 streams makes 16 round trips per decode step, each a connection of its own and a wakeup of the loop;
read together, one call returns the step's events of every sequence, handed to each sequence's reader in order.

The call blocks on every registered stream and on a wake stream of this reader's own: a sequence registered while
the call is blocked is not in it, so registering adds an entry to the wake stream, which ends the call, and the
next one reads the new stream too. An entry (not a signal) is what wakes it: one added before the call reaches
Redis is still read, since the call reads the wake stream from the last entry it saw. The reading task runs while
some sequence is registered. A failed call (Redis gone) fails every registered sequence's reader with its error.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from luminal.scheduler.sequences.inbox import Inbox

BLOCK_MS = 1000  # one call's longest wait, well under any socket timeout (redis_sequences.MAX_BLOCK_S)
WAKE_MAXLEN = 16  # wake entries kept: only the newest matters


class _Subscriber:
    """One sequence's stream: the last entry read, and the entries (or the exception that ends the reading) the
    reading task handed over, awaited by its reader."""

    def __init__(self) -> None:
        self.last = b"0-0"
        self.arrived: Inbox[Any] = Inbox()


class EventReader:
    """Belongs to one event loop. `blocking(*command)` runs a blocking command on a connection of its own,
    `call(*command)` one that returns at once; both return hiredis' plain reply (RESP2 arrays as lists)."""

    def __init__(self, blocking: Callable[..., Awaitable], call: Callable[..., Awaitable], wake_key: str, ttl_ms: int):
        self._blocking, self._call = blocking, call
        self._wake_key, self._wake_last, self._ttl_ms = wake_key, b"0-0", ttl_ms
        self._subscribers: dict[str, _Subscriber] = {}
        self._task: asyncio.Task | None = None

    @staticmethod
    def wake_key_for(prefix: str) -> str:
        """A wake stream no other reader shares."""
        return f"{prefix}{uuid.uuid4().hex}"

    async def entries(self, key: str) -> AsyncIterator[list]:
        """The fields of each entry of stream `key`, from its first, until the caller stops reading."""
        if key in self._subscribers:
            raise RuntimeError(f"stream {key!r} is read already")
        subscriber = self._subscribers[key] = _Subscriber()
        try:
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._read())
            else:  # the call blocked now lacks this stream: end it, so the next one reads it too
                await self._wake()
            while await subscriber.arrived.wait():
                items = subscriber.arrived.items
                while items:
                    item = items.popleft()
                    if isinstance(item, BaseException):
                        raise item
                    yield item
        finally:
            self._subscribers.pop(key, None)

    async def _wake(self) -> None:
        await self._call("XADD", self._wake_key, "MAXLEN", "~", WAKE_MAXLEN, "*", "w", "1")
        await self._call("PEXPIRE", self._wake_key, self._ttl_ms)

    async def _read(self) -> None:
        try:
            while self._subscribers:
                keys = [self._wake_key, *self._subscribers]
                ids = [self._wake_last, *(s.last for s in self._subscribers.values())]
                reply = await self._blocking("XREAD", "BLOCK", BLOCK_MS, "STREAMS", *keys, *ids)
                for key, entries in reply or ():
                    self._deliver(key.decode(), entries)
        except Exception as e:  # every reader learns why its events stopped, none hangs
            for subscriber in self._subscribers.values():
                subscriber.arrived.put(e)
        finally:
            self._task = None

    def _deliver(self, key: str, entries: list) -> None:
        if key == self._wake_key:
            self._wake_last = entries[-1][0]
            return
        subscriber = self._subscribers.get(key)
        if subscriber is None:  # its reader stopped since the call began
            return
        for entry_id, fields in entries:
            subscriber.last = entry_id
            subscriber.arrived.put(fields)
