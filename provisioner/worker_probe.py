"""`python -m luminal.provisioner.worker_probe ready|live`: a worker pod's probes, from the worker registry.

A worker process serves no HTTP; it registers itself (its id is the pod name, `$POD_NAME`), marks itself ready
once its program is loaded, and heartbeats between batches. `ready`: registered and ready. `live`: its last
heartbeat is younger than the longest batch allowed (plus a margin), as the provisioner judges a hung worker.
Exit status 0 passes, 1 fails (with the reason on stderr).
"""

from __future__ import annotations

import os
import sys
import time

from luminal.scheduler.registry import WorkerInfo, open_registry
from luminal.store.settings import Settings


def verdict(check: str, info: WorkerInfo | None, now: float, heartbeat_timeout_s: float) -> str | None:
    """Why the probe fails; None when it passes."""
    if info is None:
        return "this worker is not registered (yet)"
    if check == "ready":
        return None if info.ready else "the program is still loading"
    age = now - info.last_heartbeat
    return None if age <= heartbeat_timeout_s else f"no heartbeat for {age:.0f} s"


def main(argv: list[str]) -> int:
    worker_id = os.environ.get("POD_NAME", "")
    if len(argv) != 1 or argv[0] not in ("ready", "live") or not worker_id:
        print("usage: POD_NAME=... python -m luminal.provisioner.worker_probe ready|live", file=sys.stderr)
        return 2
    settings = Settings()
    registry = open_registry(settings.queue_url, settings.queue_namespace)
    try:
        info = next((w for w in registry.workers() if w.worker_id == worker_id), None)
    finally:
        registry.close()
    failure = verdict(argv[0], info, time.time(), settings.execution_timeout_s + 30)
    if failure is not None:
        print(f"{argv[0]}: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
