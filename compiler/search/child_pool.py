"""Warm child interpreters for `runner.run_isolated`: started once, then reused for one call after another.

Starting a child (search/child.py: a fresh interpreter importing egglog and the compiler) costs about a second,
more than most searches it runs. A child goes back to the pool after a call that returned or raised in Python;
one that ran past its wall clock, hit its memory limit or died is killed instead. RLIMIT_AS counts what earlier
calls left mapped, so a call reuses only a child mapping at most half its limit (one maps ~0.25 GB after a
search). Each process keeps its own pool: a forked one starts afresh, and a child whose parent is gone exits by
itself.
"""

from __future__ import annotations

import atexit
import os
import select
import subprocess
import sys
import tempfile
import threading
import time

HEADER = 8  # the frame: an 8-byte big-endian length, then that many bytes (search/child.py)
ACK = b"\x06"  # what a child answers first, once it has read a request whole
KEEP_IDLE = 2  # children kept for the next calls; more are closed (several threads searched at once)
RETIRE_BYTES = 2 << 30


class ChildDied(Exception):
    """The child exited before its reply was whole: `returncode` and the tail of its stderr say why."""

    def __init__(self, returncode: int | None, stderr: str, before_request: bool):
        super().__init__(f"the search child exited with code {returncode}")
        self.returncode, self.stderr, self.before_request = returncode, stderr, before_request


class Child:
    """One child interpreter: `call` sends a request and waits for its reply, up to a deadline."""

    def __init__(self) -> None:
        self.stderr = tempfile.TemporaryFile()  # a file, not a pipe: an unread pipe fills and stalls the child
        self.process = subprocess.Popen(
            [sys.executable, "-m", "luminal.compiler.search.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        self.address_space = 0  # bytes mapped after the last call (search/child.py reports it)
        self.replies = 0

    def call(self, request: bytes, timeout_s: float) -> bytes:
        """The reply to `request`; TimeoutError past `timeout_s` (the child is then killed), or ChildDied."""
        deadline = time.monotonic() + timeout_s
        stderr_from = self.stderr.seek(0, os.SEEK_END)
        try:
            self.process.stdin.write(len(request).to_bytes(HEADER, "big") + request)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(stderr_from, before_request=True) from None
        fd = self.process.stdout.fileno()
        # A child that ends before acknowledging the request never ran it: it was leaving idle, or was killed
        # idle (its last thread may still be exiting, so neither a poll nor the write above tells).
        self._read(fd, len(ACK), deadline, stderr_from, before_request=True)
        header = self._read(fd, HEADER, deadline, stderr_from)
        reply = self._read(fd, int.from_bytes(header, "big"), deadline, stderr_from)
        self.replies += 1
        return reply

    def _read(self, fd: int, size: int, deadline: float, stderr_from: int, before_request: bool = False) -> bytes:
        chunks: list[bytes] = []
        while size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.kill()
                raise TimeoutError
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise self._died(stderr_from, before_request)
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def _died(self, stderr_from: int, before_request: bool) -> ChildDied:
        """`before_request`: it never took the request. Only a warm child can say so: a new one that dies before
        its first reply is broken, and asking another would loop."""
        before_request = before_request and self.replies > 0
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.stderr.seek(stderr_from)
        stderr = self.stderr.read().decode(errors="replace")[-2000:]
        self.kill()
        return ChildDied(self.process.returncode, stderr, before_request)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            try:
                stream.close()
            except OSError:  # a pipe the dead child left with unflushed bytes
                pass

    def close(self) -> None:
        """Ask the child to exit (its stdin closes), then make sure it has."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


_lock = threading.Lock()
_idle: list[Child] = []
_owner = os.getpid()


def take(memory_bytes: int) -> Child:
    """An idle child of this process that is running and maps at most half of `memory_bytes`, or a new one."""
    global _owner
    chosen, unfit = None, []
    with _lock:
        if _owner != os.getpid():  # forked: the parent's children answer the parent
            _idle.clear()
            _owner = os.getpid()
        while _idle and chosen is None:
            child = _idle.pop()
            if child.alive() and child.address_space <= memory_bytes // 2:
                chosen = child
            else:
                unfit.append(child)
    for child in unfit:
        child.close()
    return chosen or Child()


def give_back(child: Child, address_space: int) -> None:
    """Keep `child` (mapping `address_space` bytes) for the next call, unless the pool is full or it maps more than
    RETIRE_BYTES."""
    child.address_space = address_space
    with _lock:
        if _owner == os.getpid() and len(_idle) < KEEP_IDLE and address_space <= RETIRE_BYTES and child.alive():
            _idle.append(child)
            return
    child.close()


@atexit.register
def close_all() -> None:
    with _lock:
        children = list(_idle) if _owner == os.getpid() else []
        _idle.clear()
    for child in children:
        child.close()
