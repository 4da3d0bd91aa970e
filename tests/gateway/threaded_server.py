"""The gateway under uvicorn in a thread of the test process, stopped without uvicorn's fixed waits.

uvicorn notices `should_exit` at its next 0.1 s tick and then gives open connections a fixed 0.1 s before it
shuts the application down: about 0.2 s of idle per test that starts a server, hundreds of times a run. Here a
stop wakes the main loop at once, and shutdown waits for the connections only as long as they stay open.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThreadedServer(uvicorn.Server):
    def __init__(self, app, port: int):
        super().__init__(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self, timeout_s: float = 30) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)

    def stop(self, timeout_s: float = 30) -> None:
        self.should_exit = True
        if self._loop is not None and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed: the server is gone
                self._loop.call_soon_threadsafe(self._wake.set)
        self.thread.join(timeout=timeout_s)

    async def main_loop(self) -> None:
        # uvicorn's ticks (its Date header, its request limit), woken early by `stop`.
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 1) % 864_000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)

    async def shutdown(self, sockets=None) -> None:
        for server in self.servers:
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        deadline = time.monotonic() + 30
        while (self.server_state.connections or self.server_state.tasks) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        for task in self.server_state.tasks:
            task.cancel()
        for server in self.servers:
            await server.wait_closed()
        await self.lifespan.shutdown()
