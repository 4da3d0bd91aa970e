"""Workers as local processes (`python -m luminal.scheduler.worker_process`), one per replica.

They share nothing with the gateway but the metadata database, the artifact directory and the queue, so this
backend needs a queue other processes can reach: Redis Streams (`LUMINAL_QUEUE_URL=redis://...`). A process
learns its deployment from the database and its settings from the same `LUMINAL_*` environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from luminal.provisioner.backends import WorkerHandle, checked_device
from luminal.provisioner.device_offer import DeviceOffer, local_offer
from luminal.provisioner.worker_settings import worker_settings
from luminal.scheduler.registry import WorkerRegistry
from luminal.scheduler.worker import new_worker_id
from luminal.scheduler.worker_process import PARENT_ENV
from luminal.scheduler.worker_spec import WorkerSpec
from luminal.store.clock import SYSTEM_CLOCK, Clock
from luminal.store.settings import Settings


class _ProcessHandle:
    def __init__(
        self, process: subprocess.Popen, worker_id: str, spec: WorkerSpec, registry: WorkerRegistry, clock: Clock
    ):
        self.worker_id, self.deployment_id, self.spec = worker_id, spec.deployment_id, spec
        self.started_at = clock.monotonic()
        self._spawned_at = clock.time()  # wall clock, comparable with the ready time the process registers
        self._process, self._registry = process, registry
        self._cold_start: float | None = None

    def alive(self) -> bool:
        return self._process.poll() is None

    def cold_start_seconds(self) -> float | None:
        if self._cold_start is None:
            info = next((w for w in self._registry.workers(self.deployment_id) if w.worker_id == self.worker_id), None)
            if info is not None and info.ready_at is not None:
                # From the spawn, so the interpreter's start-up and imports count as the cold start they are.
                self._cold_start = info.ready_at - self._spawned_at
        return self._cold_start

    def stop(self) -> None:
        if self.alive():
            self._process.send_signal(signal.SIGTERM)

    def join(self, timeout: float) -> bool:
        try:
            self._process.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            return False


def _visible_device(index: int) -> str:
    """CUDA_VISIBLE_DEVICES for a child that should see our device `index`: where this process was itself
    limited to some devices, ordinals count within that list, so the child gets the list's entry."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[index] if index < len(visible) else str(index)


class LocalProcessWorkers:
    def __init__(
        self,
        settings: Settings,
        registry: WorkerRegistry,
        clock: Clock = SYSTEM_CLOCK,
        offer: DeviceOffer | None = None,  # None: this machine's CPU and every GPU it has
    ):
        if not settings.queue_url.startswith(("redis://", "rediss://")):
            raise ValueError(
                "local worker processes need a queue they can reach: set LUMINAL_QUEUE_URL=redis://... "
                "(the in-memory queue serves thread workers only)"
            )
        self.settings, self.registry, self.clock = settings, registry, clock
        self.offer = offer if offer is not None else local_offer()

    def start(self, spec: WorkerSpec) -> WorkerHandle:
        device = checked_device(self.offer, spec)
        worker_id = new_worker_id(spec.deployment_id)
        env = dict(os.environ)
        gpu = self.offer.gpu_index(device)
        if gpu is not None:  # the process sees only a GPU of its type, as its device 0
            env["CUDA_VISIBLE_DEVICES"] = _visible_device(gpu)
        env.update(worker_settings(self.settings))
        # On this machine the worker shares the gateway's own services, folders and cache.
        env.update(
            LUMINAL_DATA_DIR=str(self.settings.data_dir),
            LUMINAL_DATABASE_URL=self.settings.resolved_database_url,
            LUMINAL_QUEUE_URL=self.settings.queue_url,
            LUMINAL_ARTIFACT_URL=self.settings.artifact_url,
            LUMINAL_ARTIFACT_CACHE_DIR=str(self.settings.artifact_location.cache_dir),
        )
        env[PARENT_ENV] = str(os.getpid())  # the worker stops when this gateway dies: no other one manages it
        command = [sys.executable, "-m", "luminal.scheduler.worker_process", str(spec.deployment_id), worker_id, device]
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
        return _ProcessHandle(process, worker_id, spec, self.registry, self.clock)
