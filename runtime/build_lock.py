"""One build of a cached library at a time, across processes.

Two processes that load the same program at once (the worker processes a deployment starts together, the test
workers of one session) would each find the cached library missing and each run the compiler for the same bytes:
a tiny language model's three C programs built twice, 4 s of CPU, at every deployment of two fresh workers. The
builder holds an exclusive lock on `<library>.lock` while it builds; the others wait on it, then find the library.
The atomic rename of the built file stays what keeps a reader from a half-written one; the lock only saves work.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def held(library: Path) -> Iterator[None]:
    """Hold the build lock of `library` (its folder must exist). The lock file stays: removing it while another
    process waits on it would let a third lock a new file and build alongside."""
    with open(library.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, or when a killed holder's process ends
        yield


def built_once(library: Path, build: Callable[[], None]) -> Path:
    """`library`, made by `build()` (which writes it, atomically) unless it exists or another process built it
    while this one waited for the lock."""
    if library.exists():
        return library
    library.parent.mkdir(parents=True, exist_ok=True)
    with held(library):
        if not library.exists():
            build()
    return library
