"""The gateway's long-lived parts, built once at start and shared by every request through `app.state`."""

from __future__ import annotations

from dataclasses import dataclass

from luminal.gateway.inference_backend import InferenceBackend
from luminal.gateway.settings import Settings
from luminal.gateway.store.artifacts import ArtifactStore
from luminal.gateway.store.database import Database
from luminal.provisioner.provisioner import Provisioner
from luminal.scheduler.compile_jobs import CompileRunner
from luminal.scheduler.queues.base import RequestQueue
from luminal.scheduler.registry import WorkerRegistry


@dataclass
class Platform:
    settings: Settings
    db: Database
    artifacts: ArtifactStore
    compiles: CompileRunner
    backend: InferenceBackend | None
    # The first tenant's key when this start created it (printed once by `luminal serve`), else None.
    bootstrap_key: str | None = None
    # The scheduler's parts (None when a backend was given in their place).
    queue: RequestQueue | None = None
    registry: WorkerRegistry | None = None
    provisioner: Provisioner | None = None
