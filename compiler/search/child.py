"""The child process of `runner.run_isolated`: `python -m luminal.compiler.search.child`.

A fresh interpreter, not a fork: forking a process that holds egglog's Rust threads is unsafe, and
multiprocessing's spawn/forkserver re-run the parent's main script, which breaks any user script that calls
`lm.compile` at top level. It serves one request after another (starting it costs about a second, most of a
small search), each framed as an 8-byte big-endian length and a pickle:
- request: (the parent's sys.path, pickle of (fn, args, memory limit in bytes)), answered at once by one byte
  (ACK) saying it was read whole: a child that ends before that never ran it, so another child may;
- reply: ("ok", result, address space in bytes after it) | ("oom", traceback, ...) | ("error", traceback, ...).
It exits when its stdin closes, when its parent is gone, or after IDLE_EXIT_S without a request.
"""

from __future__ import annotations

import gc
import os
import pickle
import resource
import select
import sys
import traceback

IDLE_EXIT_S = 60.0  # a pooled child the parent forgot (it forked, or died without closing) goes away by itself
HEADER = 8
ACK = b"\x06"


def main() -> None:
    reply = os.fdopen(os.dup(1), "wb")  # the result channel; whatever fn prints goes to stderr instead
    os.dup2(2, 1)
    requests = sys.stdin.fileno()
    parent = os.getppid()
    while True:
        waited = 0.0
        while not select.select([requests], [], [], 1.0)[0]:
            waited += 1.0
            if os.getppid() != parent or waited >= IDLE_EXIT_S:
                return
        header = _read(requests, HEADER)
        if len(header) < HEADER:
            return  # the parent closed our stdin
        request = _read(requests, int.from_bytes(header, "big"))
        reply.write(ACK)
        reply.flush()
        data = _serve(request)
        reply.write(len(data).to_bytes(HEADER, "big") + data)
        reply.flush()
        gc.collect()  # the e-graph's Python side goes now, not during the next search


def _read(fd: int, size: int) -> bytes:
    """`size` bytes from `fd`, or fewer where it closes first."""
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _serve(request: bytes) -> bytes:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        paths, inner = pickle.loads(request)
        sys.path[:0] = [p for p in paths if p not in sys.path]
        fn, args, memory_bytes = pickle.loads(inner)  # imports fn's module before the limit applies
        limit = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))  # the soft limit: raised again after the call
        outcome = ("ok", fn(*args))
    except MemoryError:
        outcome = ("oom", traceback.format_exc())
    except BaseException:  # everything is reported to the parent, which raises
        outcome = ("error", traceback.format_exc())
    try:
        data = pickle.dumps((*outcome, _address_space()))
    except MemoryError:
        data = pickle.dumps(("oom", "the result could not be pickled within the memory limit", 0))
    except Exception:  # a result that does not pickle
        data = pickle.dumps(("error", traceback.format_exc(), 0))
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    return data


def _address_space() -> int:
    """Bytes of address space mapped now (what RLIMIT_AS counts), or 0 where /proc does not say."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


if __name__ == "__main__":
    main()
