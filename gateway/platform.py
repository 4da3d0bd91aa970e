"""The gateway's long-lived parts, built once at start and shared by every request through `app.state`."""

from __future__ import annotations

from dataclasses import dataclass, field

from luminal.gateway.inference_backend import InferenceBackend
from luminal.gateway.metrics import InferenceMetrics
from luminal.gateway.predictions import PredictionRunner
from luminal.gateway.settings import Settings
from luminal.gateway.store.artifacts import ArtifactStore
from luminal.gateway.store.database import Database
from luminal.gateway.webhooks import webhook_secret
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
    backend: InferenceBackend
    # The first tenant's key when this start created it (printed once by `luminal serve`), else None.
    bootstrap_key: str | None = None
    # The scheduler's parts (None when a backend was given in their place).
    queue: RequestQueue | None = None
    registry: WorkerRegistry | None = None
    provisioner: Provisioner | None = None
    metrics: InferenceMetrics = field(default_factory=InferenceMetrics)
    # Built from the parts above (the webhook secret may be generated under data_dir on the first start).
    predictions: PredictionRunner = field(init=False)

    def __post_init__(self) -> None:
        secret = webhook_secret(self.settings)
        self.predictions = PredictionRunner(self.db, self.artifacts, self.backend, self.metrics, secret)
