"""A lean blocking Redis client for a worker's three commands per request: the take script, the blocking
XREADGROUP and the completion script; and for a language-model worker's per-step writes (a pipeline).

redis-py's command layers (connection pool, retry wrapper, reply callbacks) cost a worker process about as
much CPU per request as a small model's run; here the command is written to a socket as it is and hiredis
parses the reply (as `resp_async.py` does on the gateway's event loop). Each thread has its own connection, so
a blocking read holds no other thread's. A command whose connection fails is sent once more on a new
connection, as redis-py's default retry does: the worker's scripts are written so that a repeat is harmless.
"""

from __future__ import annotations

import hashlib
import socket
import threading

import redis

from luminal.scheduler.queues.resp_async import command_bytes, connection_options, hiredis, raise_error

READ_BYTES = 65536


class _Connection:
    def __init__(self, host: str, port: int, setup: list[tuple]):
        self._socket = socket.create_connection((host, port))
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = hiredis.Reader(replyError=redis.ResponseError)
        try:
            for command in setup:
                raise_error(self.send(*command))
        except BaseException:  # a refused AUTH: the socket must not leak
            self._socket.close()
            raise

    def send(self, *args):
        """The reply to one command (an error reply returned, not raised)."""
        return self.send_all([args])[0]

    def send_all(self, commands: list[tuple]) -> list:
        """The replies to `commands` (error replies returned, not raised), the commands written together and the
        replies read in order: one round trip."""
        self._socket.sendall(b"".join(command_bytes(args) for args in commands))
        replies = []
        while len(replies) < len(commands):
            while (reply := self._reader.gets()) is False:
                data = self._socket.recv(READ_BYTES)
                if not data:
                    raise ConnectionError("the Redis connection closed")
                self._reader.feed(data)
            replies.append(reply)
        return replies

    def close(self) -> None:
        self._socket.close()


class SyncRespClient:
    def __init__(self, url: str):
        self._host, self._port, self._setup = connection_options(url)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: set[_Connection] = set()

    def call(self, *args):
        """One command's reply; an error reply raises ResponseError, a lost connection redis.ConnectionError."""
        return self.pipeline([args])[0]

    def pipeline(self, commands: list[tuple]) -> list:
        """Each command's reply, the commands sent in one round trip; an error reply raises ResponseError once all
        are read. On a failed connection they are sent once more on a new one, as redis-py's pipeline does."""
        for attempt in (1, 2):
            connection = self._connection()
            try:
                replies = connection.send_all(commands)
            except OSError as e:  # ConnectionError is one: the replies can never come on this connection
                self._drop(connection)
                if attempt == 2:
                    raise redis.ConnectionError(f"Redis at {self._host}:{self._port}: {e}") from e
                continue
            for reply in replies:
                raise_error(reply)
            return replies

    def evalsha(self, script: bytes, keys: list, args: list):
        """The script by its SHA1, loaded with EVAL the first time a server lacks it."""
        sha = hashlib.sha1(script).hexdigest()
        try:
            return self.call("EVALSHA", sha, len(keys), *keys, *args)
        except redis.ResponseError as e:
            if not str(e).startswith("NOSCRIPT"):
                raise
            return self.call("EVAL", script, len(keys), *keys, *args)

    def close(self) -> None:
        with self._lock:
            connections, self._all = self._all, set()
        for connection in connections:
            connection.close()

    def _connection(self) -> _Connection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            try:
                connection = _Connection(self._host, self._port, self._setup)
            except OSError as e:
                raise redis.ConnectionError(f"cannot connect to Redis at {self._host}:{self._port}: {e}") from e
            self._local.connection = connection
            with self._lock:
                self._all.add(connection)
        return connection

    def _drop(self, connection: _Connection) -> None:
        self._local.connection = None
        with self._lock:
            self._all.discard(connection)
        connection.close()
