"""One thread that runs every compiled CPU program of a process whose several threads run programs (the embedded
platform's worker threads: one per deployment replica).

libgomp gives each thread that starts a parallel region its own team of threads, kept while that thread lives,
and once the teams' threads outnumber the CPUs it stops spinning between parallel regions and sleeps on a futex
at each one: with a second worker thread alive, every run of all-MiniLM-L6-v2 took 4.8 ms instead of 2.9 on 2 CPUs
(bench/openmp_teams.py). Runs handed to one thread keep one team. A hand-off costs two thread wake-ups (about
70 µs here); nothing else is lost, since each run uses all the cores and so runs alone anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any


class _Call:
    __slots__ = ("fn", "args", "result", "error", "done")

    def __init__(self, fn: Callable[..., Any], args: tuple):
        self.fn, self.args, self.result, self.error = fn, args, None, None
        self.done = threading.Lock()  # held until the call has run: a lock is the cheapest one-shot signal
        self.done.acquire()


class ComputeThread:
    def __init__(self, name: str = "cpu-programs"):
        self.name = name
        self._calls: SimpleQueue[_Call] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` run on the compute thread, its result or its exception returned here."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        self._start()
        call = _Call(fn, args)
        self._calls.put(call)
        call.done.acquire()
        if call.error is not None:
            raise call.error
        return call.result

    def _start(self) -> None:
        if self._thread is None:
            with self._starting:
                if self._thread is None:  # daemon: a process may exit without closing it
                    thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                    thread.start()
                    self._thread = thread

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            try:
                call.result = call.fn(*call.args)
            except BaseException as e:  # handed to the caller, whatever it is
                call.error = e
            finally:
                call.done.release()
