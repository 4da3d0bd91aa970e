"""The gateway's settings that every worker it starts runs with, whichever backend starts it (a local process, a
Kubernetes pod, an EC2 instance). A worker reads its settings from its `LUMINAL_*` environment, where one left out
takes its default, not the gateway's: pods and instances given no LUMINAL_RECLAIM_IDLE_S re-ran a killed worker's
requests after the default 30 s whatever the gateway said. One list, so that no backend can leave one out.

Where a worker reaches the shared services (database, queue and artifact URLs, which carry credentials) is each
backend's own business: the gateway's own URLs on this machine, a Secret on a cluster or a cloud.
"""

from __future__ import annotations

import json

from luminal.store.settings import Settings


def worker_settings(settings: Settings) -> dict[str, str]:
    """Environment variable -> value, for each of the gateway's settings that its workers read."""
    return {
        # The Redis keys of this platform, among others sharing the server.
        "LUMINAL_QUEUE_NAMESPACE": settings.queue_namespace,
        # What the usage records the worker writes cost.
        "LUMINAL_GPU_PRICES_PER_SECOND": json.dumps(settings.gpu_prices_per_second),
        # The longest batch: how long a pod's probe lets a worker go without a heartbeat.
        "LUMINAL_EXECUTION_TIMEOUT_S": str(settings.execution_timeout_s),
        # How long a dead worker's requests wait before a live worker re-runs them.
        "LUMINAL_RECLAIM_IDLE_S": str(settings.reclaim_idle_s),
        # The most the worker's read-through cache of artifacts keeps on its disk.
        "LUMINAL_ARTIFACT_CACHE_BYTES": str(settings.artifact_cache_bytes),
    }
