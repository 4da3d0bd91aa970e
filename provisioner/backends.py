"""Where workers run, behind one interface (`WorkerBackend`), and the backend of the embedded default: threads of
this process, with the in-memory queue (`ThreadWorkers`). The other backends have the same shape, each in its own
module, chosen by `LUMINAL_WORKER_BACKEND` (worker_backends.py): local worker processes (local_processes.py),
Kubernetes Deployments (kubernetes_workers.py) and EC2 instances (ec2_workers.py), all on a shared queue (Redis).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Protocol

from luminal.provisioner.device_offer import DeviceOffer, local_offer
from luminal.scheduler.billing import UsageLedger
from luminal.scheduler.generation.engines import Engines
from luminal.scheduler.llm_worker import LanguageModelWorker
from luminal.scheduler.programs import ProgramCache
from luminal.scheduler.queues.base import RequestQueue
from luminal.scheduler.registry import WorkerRegistry
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.worker import Worker, new_worker_id
from luminal.scheduler.worker_spec import WorkerSpec
from luminal.store.clock import SYSTEM_CLOCK, Clock


class WorkerHandle(Protocol):
    worker_id: str
    deployment_id: int
    spec: WorkerSpec  # what it was started with
    started_at: float  # monotonic

    def alive(self) -> bool: ...

    def cold_start_seconds(self) -> float | None:
        """From start to ready (program loaded), once ready; None before."""
        ...

    def stop(self) -> None:
        """Ask for a graceful stop: the worker finishes the batch it is executing, then exits. Non-blocking."""
        ...

    def join(self, timeout: float) -> bool: ...


class WorkerBackend(Protocol):
    offer: DeviceOffer  # the GPU types its workers can run on; the provisioner starts none for any other

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        """A worker for `spec` on a device of its GPU type; ValueError when `offer` refuses that type."""
        ...


def serves_hash(spec: WorkerSpec) -> str:
    """A short digest of what a worker started with `spec` serves (the fields `WorkerSpec.serves_like` compares),
    for workers that outlive this process: a pod template's annotation, an instance's tag."""
    served = [spec.program_key, spec.gpu_type, spec.max_batch_size, spec.max_queue_delay_ms]
    return hashlib.sha256(json.dumps(served).encode()).hexdigest()[:16]


def checked_device(offer: DeviceOffer, spec: WorkerSpec) -> str:
    """The device type a worker for `spec` runs on: its GPU type, which `offer` must provide."""
    refusal = offer.refusal(spec.gpu_type)
    if refusal is not None:
        raise ValueError(f"deployment {spec.deployment_id}: {refusal}")
    return spec.gpu_type


class _ThreadHandle:
    def __init__(self, worker: Worker | LanguageModelWorker, spec: WorkerSpec, clock: Clock = SYSTEM_CLOCK):
        self.worker_id, self.deployment_id, self.spec = worker.worker_id, spec.deployment_id, spec
        self.clock = clock
        self.started_at = clock.monotonic()
        self._worker, self._stop = worker, threading.Event()
        self._ready_at: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"worker-{worker.worker_id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        watcher = threading.Thread(target=self._note_ready, daemon=True)
        watcher.start()
        try:
            self._worker.run(self._stop)
        finally:
            self._worker.ready.set()  # release the watcher if loading failed

    def _note_ready(self) -> None:
        self._worker.ready.wait()
        self._ready_at = self.clock.monotonic()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def cold_start_seconds(self) -> float | None:
        return None if self._ready_at is None else self._ready_at - self.started_at

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


class ThreadWorkers:
    """Workers as threads sharing this process's queue and loaded programs. The compiled C releases the GIL
    while it runs, so a batch executing does not stall the gateway's event loop. A language model's workers take
    sequences from `sequences` and list their engines in `engines`."""

    def __init__(
        self,
        queue: RequestQueue,
        programs: ProgramCache,
        ledger: UsageLedger,
        registry: WorkerRegistry,
        clock: Clock = SYSTEM_CLOCK,  # times the cold starts
        offer: DeviceOffer | None = None,  # None: this machine's CPU and its default GPU
        sequences: SequenceTransport | None = None,  # None: language models cannot be served
        engines: Engines | None = None,
    ):
        self.queue, self.programs, self.ledger, self.registry = queue, programs, ledger, registry
        self.clock = clock
        self.offer = offer if offer is not None else local_offer().default_device_only()
        self.sequences = sequences
        self.engines = engines if engines is not None else Engines()

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        device = checked_device(self.offer, spec)
        worker_id = new_worker_id(spec.deployment_id)
        worker: Worker | LanguageModelWorker
        if spec.is_language_model:
            if self.sequences is None:
                raise ValueError(f"deployment {spec.deployment_id} is a language model: no sequence transport given")
            worker = LanguageModelWorker(spec, self.sequences, self.programs.path_of, self.ledger, self.registry,
                                         worker_id, device, self.engines, self.programs.compute)  # fmt: skip
        else:
            worker = Worker(spec, self.queue, self.programs, self.ledger, self.registry, worker_id, device=device)
        return _ThreadHandle(worker, spec, self.clock)
