"""A lean asyncio Redis client for the gateway's two commands per request: the admission script (EVALSHA) and
the wait for the result (BLPOP).

redis.asyncio spends about 0.1 ms of CPU per command (its connection pool, locks and command layers); this
spends a fraction of that: the command is written to the socket as it is, and hiredis parses the reply in the
protocol's callback. On a loaded machine the gateway's CPU per request is latency (bench/redis_legs.py).

Commands that return at once share one pipelined connection (replies come back in order); each blocking command
takes a connection of its own from a free list, returned after. A connection that fails or whose waiter is
cancelled is closed: a reply can then never reach the wrong caller. Only plain `redis://host:port/db` URLs (with
an optional user and password) and hiredis: anything else (`rediss://`, no hiredis) keeps redis.asyncio.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque

import redis
from redis.connection import parse_url

try:
    import hiredis
except ImportError:  # redis-py runs without it, and so does the queue: through redis.asyncio
    hiredis = None


def supports(url: str) -> bool:
    """Whether `RespClient` can serve this URL here."""
    return hiredis is not None and url.startswith("redis://") and "connection_class" not in parse_url(url)


def connection_options(url: str) -> tuple[str, int, list[tuple]]:
    """The host, port and the commands each new connection runs first (AUTH, SELECT) of a redis:// URL."""
    options = parse_url(url)
    setup = []
    if options.get("password") is not None:
        user = options.get("username")
        setup.append(("AUTH", user, options["password"]) if user else ("AUTH", options["password"]))
    if int(options.get("db", 0)):
        setup.append(("SELECT", int(options["db"])))
    return options.get("host", "localhost"), int(options.get("port", 6379)), setup


def command_bytes(args: tuple) -> bytes:
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int | float):
            arg = repr(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class _Connection(asyncio.Protocol):
    def __init__(self):
        self.transport: asyncio.Transport | None = None
        self._reader = hiredis.Reader(replyError=redis.ResponseError)
        self._waiting: deque[asyncio.Future] = deque()
        self.broken: BaseException | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            future = self._waiting.popleft()
            if not future.done():  # a cancelled caller's reply is dropped
                future.set_result(reply)

    def connection_lost(self, exc) -> None:
        self.broken = exc or ConnectionError("the Redis connection closed")
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(redis.ConnectionError(str(self.broken)))

    def send(self, *args) -> asyncio.Future:
        if self.broken is not None:
            raise redis.ConnectionError(f"the Redis connection is closed: {self.broken}")
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self.transport.write(command_bytes(args))
        return future

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class RespClient:
    """Belongs to the event loop it is used on (as redis.asyncio clients do)."""

    def __init__(self, url: str):
        self._host, self._port, self._setup = connection_options(url)
        self._shared: _Connection | None = None
        self._opening: asyncio.Lock | None = None
        self._idle: list[_Connection] = []  # for blocking commands
        self._all: set[_Connection] = set()

    async def call(self, *args):
        """A command that returns at once, on the shared connection; an error reply raises ResponseError."""
        if self._shared is None or self._shared.broken is not None:
            if self._opening is None:
                self._opening = asyncio.Lock()
            async with self._opening:
                if self._shared is None or self._shared.broken is not None:
                    self._shared = await self._open()
        return raise_error(await self._shared.send(*args))

    async def call_blocking(self, *args):
        """A blocking command (BLPOP) on a connection of its own for its duration."""
        connection = None
        while self._idle and connection is None:
            connection = self._idle.pop()
            if connection.broken is not None:  # closed while idle (a Redis restart): not reused
                self._discard(connection)
                connection = None
        connection = connection or await self._open()
        try:
            reply = await connection.send(*args)
        except BaseException:  # cancelled or failed: its reply, if any, must reach nobody
            self._discard(connection)
            raise
        if connection.broken is None:
            self._idle.append(connection)
        return raise_error(reply)

    async def evalsha(self, script: bytes, keys: list, args: list):
        """The script by its SHA1, loaded with EVAL the first time a server lacks it."""
        sha = hashlib.sha1(script).hexdigest()
        try:
            return await self.call("EVALSHA", sha, len(keys), *keys, *args)
        except redis.ResponseError as e:
            if not str(e).startswith("NOSCRIPT"):
                raise
            return await self.call("EVAL", script, len(keys), *keys, *args)

    def close(self) -> None:
        for connection in list(self._all):
            self._discard(connection)
        self._shared = None

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(_Connection, self._host, self._port)
        except OSError as e:
            raise redis.ConnectionError(f"cannot connect to Redis at {self._host}:{self._port}: {e}") from e
        self._all.add(connection)
        try:
            for command in self._setup:
                raise_error(await connection.send(*command))
        except BaseException:
            self._discard(connection)
            raise
        return connection

    def _discard(self, connection: _Connection) -> None:
        self._all.discard(connection)
        if connection in self._idle:
            self._idle.remove(connection)
        connection.close()


def raise_error(reply):
    if isinstance(reply, redis.ResponseError):
        raise reply
    return reply
