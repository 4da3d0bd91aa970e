"""The child process of `runner.run_isolated`: `python -m luminal.compiler.search.child`.

stdin: pickle of (the parent's sys.path, pickle of (fn, args, memory limit in bytes)). stdout: pickle of
("ok", result) | ("oom", traceback) | ("error", traceback). A fresh interpreter, not a fork: forking a process
that holds egglog's Rust threads is unsafe, and multiprocessing's spawn/forkserver re-run the parent's main
script, which breaks any user script that calls `lm.compile` at top level.
"""

from __future__ import annotations

import os
import pickle
import resource
import sys
import traceback


def main() -> None:
    reply = os.fdopen(os.dup(1), "wb")  # the result channel; whatever fn prints goes to stderr instead
    os.dup2(2, 1)
    paths, inner = pickle.loads(sys.stdin.buffer.read())
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:
        fn, args, memory_bytes = pickle.loads(inner)  # imports fn's module before the limit applies
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        outcome = ("ok", fn(*args))
    except MemoryError:
        outcome = ("oom", traceback.format_exc())
    except BaseException:  # everything is reported to the parent, which raises
        outcome = ("error", traceback.format_exc())
    try:
        data = pickle.dumps(outcome)
    except MemoryError:
        data = pickle.dumps(("oom", "the result could not be pickled within the memory limit"))
    except Exception:  # a result that does not pickle
        data = pickle.dumps(("error", traceback.format_exc()))
    reply.write(data)
    reply.close()


if __name__ == "__main__":
    main()
