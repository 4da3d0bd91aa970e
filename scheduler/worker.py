"""A worker: serves one deployment until told to stop. It registers, loads the compiled program (the cold
start), then forms batches from the deployment's queue, executes them and heartbeats between batches.

The same loop runs in a thread of the embedded platform and in a worker process of the distributed one; only
the queue, ledger and registry objects it is given differ.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from luminal.batching.former import BatchFormer
from luminal.batching.layout import BatchLayout
from luminal.batching.policy import BatchPolicy
from luminal.scheduler.batch_execution import BatchExecutor
from luminal.scheduler.billing import UsageLedger
from luminal.scheduler.programs import ProgramCache
from luminal.scheduler.queues.base import RequestQueue
from luminal.scheduler.registry import UnknownWorker, WorkerInfo, WorkerRegistry
from luminal.scheduler.worker_spec import WorkerSpec

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.2  # how long an idle worker blocks on its queue before it checks for a stop
HEARTBEAT_S = 1.0
RECLAIM_EVERY_S = 5.0


def new_worker_id(deployment_id: int) -> str:
    return f"d{deployment_id}-{uuid.uuid4().hex[:10]}"


def batching_for(spec: WorkerSpec) -> tuple[BatchLayout | None, BatchPolicy]:
    """The deployment's batch layout (None: the program cannot batch) and its policy; the former keeps each
    batch within what the program accepts."""
    layout = BatchLayout.from_signature(spec.signature, spec.symbols)
    return layout, BatchPolicy.from_deployment(spec.max_batch_size, spec.max_queue_delay_ms)


class Worker:
    def __init__(
        self,
        spec: WorkerSpec,
        queue: RequestQueue,
        programs: ProgramCache,
        ledger: UsageLedger | None,  # None: the queue stores each batch's usage record with its answers
        registry: WorkerRegistry,
        worker_id: str | None = None,
        reclaim_idle_s: float = 30.0,
        device: str = "cpu",  # the GPU type it runs on (chosen by its backend): what its batches are billed as
    ):
        if ledger is None and not getattr(queue, "stores_usage", False):
            raise ValueError(f"{type(queue).__name__} does not store usage records: the worker needs a ledger")
        self.spec, self.queue, self.programs, self.ledger, self.registry = spec, queue, programs, ledger, registry
        self.worker_id = worker_id or new_worker_id(spec.deployment_id)
        # A delivery unacknowledged this long belongs to a worker that died (or hangs): another one takes it.
        self.reclaim_idle_s = reclaim_idle_s
        self.device = device
        self.ready = threading.Event()

    def run(self, stop: threading.Event) -> None:
        started = time.time()
        self._info = WorkerInfo(
            worker_id=self.worker_id,
            deployment_id=self.spec.deployment_id,
            pid=os.getpid(),
            host=socket.gethostname(),
            started_at=started,
            device=self.device,
        )
        self.registry.register(self._info)
        try:
            program = self.programs.get(self.spec.program_key)
            self.registry.mark_ready(self.worker_id)
            self.ready.set()
            log.info("worker %s ready after %.3f s", self.worker_id, time.time() - started)
            self._serve(program.run, stop)
        finally:
            self.registry.deregister(self.worker_id)

    def _heartbeat(self, stop: threading.Event) -> None:
        try:
            self.registry.heartbeat(self.worker_id)
        except UnknownWorker:
            # The provisioner took this worker for dead (its heartbeats stopped) and has replaced it; what it
            # held is being reclaimed by others. It steps down rather than serve beside its replacement.
            log.warning("worker %s was deregistered: stopping", self.worker_id)
            stop.set()

    def _serve(self, run, stop: threading.Event) -> None:
        layout, policy = batching_for(self.spec)
        former = BatchFormer(self.queue, self.spec.deployment_id, self.worker_id)
        executor = BatchExecutor(self.spec, self.worker_id, self.device, self.queue, self.ledger, layout, policy)
        last_beat = last_reclaim = time.monotonic()
        while not stop.is_set():
            deliveries = former.next_batch(policy, layout, IDLE_WAIT_S)
            if deliveries:
                executor.execute(run, deliveries)
            now = time.monotonic()
            if now - last_reclaim >= RECLAIM_EVERY_S:
                last_reclaim = now
                reclaimed = self.queue.reclaim(
                    self.spec.deployment_id, self.worker_id, self.reclaim_idle_s, policy.max_batch_size
                )
                for delivery in reclaimed:  # one at a time: together they could exceed the batch limit
                    executor.execute(run, [delivery])
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                self._heartbeat(stop)
        # Requests the former took for a next batch are served before the worker goes, not left to a reclaim.
        while former.carried:
            executor.execute(run, former.next_batch(policy, layout, 0.0))
