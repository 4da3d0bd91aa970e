"""`python -m luminal.scheduler.worker_process DEPLOYMENT_ID WORKER_ID [DEVICE]`: one worker as its own process,
on a device of the deployment's GPU type (DEVICE, "cpu" when omitted; its usage records bill that type). The
local-process backend starts it, and so do Kubernetes pods and EC2 instances (`LUMINAL_WORKER_COMMAND`).
Settings come from the `LUMINAL_*` environment; SIGTERM stops it after the batch it is executing, and so does the
death of the local gateway that started it (LUMINAL_WORKER_PARENT_PID)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from luminal.scheduler import tracing
from luminal.scheduler.billing import UsageLedger
from luminal.scheduler.collector import settle_serving_process
from luminal.scheduler.ledger import SqlUsageLedger
from luminal.scheduler.llm_worker import LanguageModelWorker
from luminal.scheduler.openmp_spin import bound_openmp_spinning
from luminal.scheduler.programs import ProgramCache
from luminal.scheduler.queues import open_queue
from luminal.scheduler.registry import WorkerRegistry, open_registry
from luminal.scheduler.sequences import open_sequences
from luminal.scheduler.worker import Worker
from luminal.scheduler.worker_spec import WorkerSpec, spec_for
from luminal.store.database import Database
from luminal.store.settings import Settings

log = logging.getLogger(__name__)
# Set by the local provisioner (provisioner/local_processes.py): the pid of the gateway that started this worker.
PARENT_ENV = "LUMINAL_WORKER_PARENT_PID"
PARENT_POLL_S = 0.5
WORKER_SERVICE = "luminal-worker"  # service.name of its spans unless OTEL_SERVICE_NAME names one


def stop_with_parent(stop: threading.Event, parent_pid: int, poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """Set `stop` once this process's parent is no longer `parent_pid` (it died and this process was reparented).
    A gateway's local worker processes are known to its provisioner alone: orphaned, they would serve on
    unmanaged, never scaled down, beside the replicas the next lease holder starts. Stopping them like a SIGTERM
    finishes their batch; what they had not taken stays queued for the new holder's workers."""

    def watch() -> None:
        while not stop.wait(poll_s):
            if os.getppid() != parent_pid:
                log.warning("the gateway (pid %d) that started this worker died: stopping", parent_pid)
                stop.set()

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(message)s")
    if len(argv) not in (2, 3) or not argv[0].isdigit():
        print("usage: python -m luminal.scheduler.worker_process DEPLOYMENT_ID WORKER_ID [DEVICE]", file=sys.stderr)
        return 2
    deployment_id, worker_id = int(argv[0]), argv[1]
    device = argv[2] if len(argv) == 3 else "cpu"
    bound_openmp_spinning()  # before its program loads (a worker started by Kubernetes or on a VM, not by serve)
    settings = Settings()
    db = Database(settings.resolved_database_url)
    with db.session() as session:
        spec = spec_for(session, deployment_id)
    if spec is None:
        print(f"deployment {deployment_id} is not ready to serve", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if os.environ.get(PARENT_ENV, "").isdigit():
        stop_with_parent(stop, int(os.environ[PARENT_ENV]))
    queue = open_queue(settings.queue_url, settings.queue_namespace)
    registry = open_registry(settings.queue_url, settings.queue_namespace)
    programs = ProgramCache(settings.artifact_location.open().local_path, max_loaded=1)
    # On Redis each batch's usage record is stored with its answers in one atomic step and the gateways' drainers
    # write it to the database, off the answer path. Elsewhere it is written to the database before the answers
    # are released. Either way a killed worker process loses no billing.
    ledger = None if queue.stores_usage else SqlUsageLedger(db, settings.gpu_prices_per_second)
    settle_serving_process()
    tracing.configure(WORKER_SERVICE)  # its spans join the gateways' traces (OTEL_EXPORTER_OTLP_ENDPOINT)
    try:
        if spec.is_language_model:
            _serve_language_model(spec, settings, programs, ledger or _usage_stream(settings), registry, worker_id,
                                  device, stop)  # fmt: skip
        else:
            Worker(spec, queue, programs, ledger, registry, worker_id, settings.reclaim_idle_s, device).run(stop)
    finally:
        queue.close()
        db.dispose()
        tracing.shutdown()  # the spans still buffered are exported before the process exits
    return 0


def _usage_stream(settings: Settings) -> UsageLedger:
    """Where a language-model worker on Redis bills its sequences: the usage stream the gateways drain."""
    from luminal.scheduler.usage_stream import UsageStreamLedger  # imports redis only on Redis

    return UsageStreamLedger(settings.queue_url, settings.queue_namespace)


def _serve_language_model(
    spec: WorkerSpec,
    settings: Settings,
    programs: ProgramCache,
    ledger: UsageLedger,
    registry: WorkerRegistry,
    worker_id: str,
    device: str,
    stop: threading.Event,
) -> None:
    """One engine taking the deployment's sequences from the shared transport (Redis) until stopped."""
    sequences = open_sequences(settings.queue_url, settings.queue_namespace)
    try:
        LanguageModelWorker(spec, sequences, programs.path_of, ledger, registry, worker_id, device).run(stop)
    finally:
        sequences.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
