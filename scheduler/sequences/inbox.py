"""Items handed from one coroutine to another on the same event loop, awaited with an optional timeout: one
future (and one timer) per wait that finds nothing. An asyncio.Queue read under asyncio.wait_for starts a task and
three futures per item, and a gateway relaying many streams passes on an item per token of each."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Inbox(Generic[T]):
    def __init__(self) -> None:
        self.items: deque[T] = deque()
        self._waiter: asyncio.Future | None = None

    def put(self, item: T) -> None:
        self.items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, timeout: float | None = None) -> bool:
        """Whether items are there, waiting for one at most `timeout` seconds (None: no limit)."""
        if not self.items:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if timeout is None else loop.call_later(timeout, _end_wait, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        return bool(self.items)


def _end_wait(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)
