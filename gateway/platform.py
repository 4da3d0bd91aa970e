"""The gateway's long-lived parts, built once at start and shared by every request through `app.state`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from luminal.gateway.dashboard.sampler import MetricsSampler
from luminal.gateway.embedding_tokenizers import EmbeddingTokenizers
from luminal.gateway.generation_metrics import GenerationMetrics
from luminal.gateway.inference_backend import InferenceBackend
from luminal.gateway.language_model_texts import LanguageModelTexts
from luminal.gateway.metadata_changes import MetadataChanges, NoMetadataChanges
from luminal.gateway.metrics import InferenceMetrics
from luminal.gateway.predictions import PredictionRunner
from luminal.gateway.rate_limits import RateLimiter, open_rate_limiter
from luminal.gateway.replicas import ReplicaHeartbeat
from luminal.gateway.traffic_routing import ReadySplit, VersionChooser
from luminal.gateway.ttl_cache import TtlCache
from luminal.gateway.webhooks import WebhookSender, webhook_secret
from luminal.gateway.worker_metrics import WorkerLoadCollector
from luminal.provisioner.provisioner import Provisioner
from luminal.scheduler.billing import UsageLedger
from luminal.scheduler.compile_jobs import CompileRunner
from luminal.scheduler.compute_thread import ComputeThread
from luminal.scheduler.generation.engines import Engines
from luminal.scheduler.ledger import SqlUsageLedger
from luminal.scheduler.ledger_writer import BufferedLedger
from luminal.scheduler.queues.base import RequestQueue
from luminal.scheduler.registry import WorkerRegistry
from luminal.scheduler.sequences.base import SequenceTransport
from luminal.scheduler.usage_drainer import UsageDrainer
from luminal.store.artifacts import ArtifactStore
from luminal.store.database import Database
from luminal.store.settings import Settings
from luminal.store.tables import Tenant


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
    ledger: BufferedLedger | None = None  # the thread workers' usage ledger (flushed before a usage report)
    # This replica's heartbeat among the gateways on the database; its id owns the predictions run here.
    heartbeat: ReplicaHeartbeat | None = None
    # On Redis: moves the usage records worker processes stored with their answers into the database.
    usage_drainer: UsageDrainer | None = None
    # Where this process's CPU programs run (None: on their callers' threads).
    compute: ComputeThread | None = None
    # Where language models' sequences go to their workers (None when a backend was given for the scheduler).
    sequences: SequenceTransport | None = None
    # The engines of language models whose workers are threads of this process (metrics read them).
    generation: Engines = field(default_factory=Engines)
    metrics: InferenceMetrics = field(default_factory=InferenceMetrics)
    # Tells the other gateways that keys, tenants, models or deployments changed (set once the loop runs).
    metadata_changes: MetadataChanges = field(default_factory=NoMetadataChanges)
    # Each tenant's requests-per-second allowance (shared through Redis when the queues are).
    rate_limiter: RateLimiter = field(init=False)
    # Built from the parts above (the webhook secret may be generated under data_dir on the first start).
    predictions: PredictionRunner = field(init=False)
    generation_metrics: GenerationMetrics = field(init=False)
    # The dashboard's time series, sampled from the two above (started with the app: gateway/app.py).
    dashboard_sampler: MetricsSampler = field(init=False)
    # Where this gateway bills the tokens a language-model worker delivered before it died (a dead worker bills
    # nothing; relay.py): straight to the database, once per request like every record.
    cut_short_ledger: UsageLedger = field(init=False)
    # Language models' tokenizers and context lengths (the OpenAI routes tokenize; the workers generate).
    language_models: LanguageModelTexts = field(init=False)
    # Embedding models' tokenizers (the embeddings route tokenizes; the workers run token ids).
    embedding_tokenizers: EmbeddingTokenizers = field(init=False)

    # The hot path's lookups: API key -> tenant, and (tenant, model, version) -> its ready deployment.
    tenants: TtlCache[Tenant] = field(init=False)
    ready_deployments: TtlCache[dict[str, Any]] = field(init=False)
    # (tenant, model) -> its traffic split over its ready versions, and each split's round (traffic_routing.py).
    traffic_splits: TtlCache[ReadySplit] = field(init=False)
    version_chooser: VersionChooser = field(default_factory=VersionChooser)

    def __post_init__(self) -> None:
        self.tenants = TtlCache(self.settings.metadata_cache_s)
        self.ready_deployments = TtlCache(self.settings.metadata_cache_s)
        self.traffic_splits = TtlCache(self.settings.metadata_cache_s)
        self.rate_limiter = open_rate_limiter(self.settings.queue_url, self.settings.queue_namespace)
        webhooks = WebhookSender(webhook_secret(self.settings), self.settings.webhook_allow_private)
        self.generation_metrics = GenerationMetrics(self.metrics.registry, self.generation)
        if self.sequences is not None and self.registry is not None:  # every LLM worker's gauges, from its reports
            self.metrics.registry.register(WorkerLoadCollector(self.registry, self.sequences))
        s = self.settings
        self.dashboard_sampler = MetricsSampler(
            self.metrics, self.generation_metrics, s.dashboard_sample_s, s.dashboard_points
        )
        self.embedding_tokenizers = EmbeddingTokenizers(self.artifacts.local_path)
        self.language_models = LanguageModelTexts(self.artifacts.local_path)
        self.cut_short_ledger = SqlUsageLedger(self.db, self.settings.gpu_prices_per_second)
        owner = None if self.heartbeat is None else self.heartbeat.replica_id
        self.predictions = PredictionRunner(self.db, self.artifacts, self.backend, self.metrics, webhooks, owner)

    def unschedulable(self, gpu_type: str) -> str | None:
        """Why no worker can serve a deployment of `gpu_type`, or None (also when a test's backend serves all)."""
        return None if self.provisioner is None else self.provisioner.unschedulable(gpu_type)

    def clear_caches(self) -> None:
        self.tenants.clear()
        self.ready_deployments.clear()
        self.traffic_splits.clear()

    def metadata_changed(self) -> None:
        """Another gateway (or this one) changed keys, tenants, models or deployments: forget what the caches hold,
        and let the provisioner re-read deployments and tenants' standing now (when it holds the lease, it stops
        a deleted deployment's workers or a suspended tenant's at once, not at its next periodic read)."""
        self.clear_caches()
        if self.provisioner is not None:
            self.provisioner.refresh()
