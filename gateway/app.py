"""The gateway application: builds the platform's parts at start and mounts one router per resource."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI

from luminal.gateway.errors import install_error_handlers
from luminal.gateway.infer_fast_path import InferFastPath
from luminal.gateway.inference_backend import InferenceBackend
from luminal.gateway.metadata_changes import open_metadata_changes
from luminal.gateway.platform import Platform
from luminal.gateway.replicas import ReplicaHeartbeat, replica_id
from luminal.gateway.routers import (
    admin,
    dashboard,
    deployments,
    inference,
    keys,
    lora_adapters,
    metrics,
    models,
    openai_api,
    predictions,
    server,
    traffic,
    usage,
    workers,
)
from luminal.gateway.scheduler_backend import SchedulerBackend
from luminal.gateway.sweeps import Sweeper
from luminal.provisioner.backends import ThreadWorkers
from luminal.provisioner.provisioner import Provisioner, ProvisionerSettings
from luminal.provisioner.tenant_limits import TenantLimits
from luminal.provisioner.worker_backends import open_worker_backend
from luminal.scheduler import tracing
from luminal.scheduler.compile_jobs import ProcessCompileRunner, ThreadCompileRunner
from luminal.scheduler.compute_thread import ComputeThread
from luminal.scheduler.generation.engines import Engines
from luminal.scheduler.ledger import SqlUsageLedger
from luminal.scheduler.ledger_writer import BufferedLedger
from luminal.scheduler.programs import ProgramCache
from luminal.scheduler.queues import open_queue
from luminal.scheduler.queues.base import RequestQueue
from luminal.scheduler.registry import WorkerRegistry, open_registry
from luminal.scheduler.sequences import SequenceTransport, open_sequences
from luminal.scheduler.usage_drainer import UsageDrainer
from luminal.scheduler.usage_journal import UsageJournal, replay
from luminal.scheduler.worker_spec import WorkerSpec, ready_specs
from luminal.store import deployments as deployment_store
from luminal.store.artifacts import ArtifactStore
from luminal.store.database import Database, migrate
from luminal.store.leases import PROVISIONER, LeaseKeeper, startup_lock
from luminal.store.settings import Settings
from luminal.store.tenant_admin import constrained_tenants
from luminal.store.tenants import ensure_bootstrap_tenant

GATEWAY_SERVICE = "luminal-gateway"  # service.name of its spans unless OTEL_SERVICE_NAME names one


def start_platform(settings: Settings, backend: InferenceBackend | None = None) -> Platform:
    """Migrate the schema, create the first tenant on a first start, resubmit compiles a restart cut off, and
    start the scheduler's side: the queues, the worker registry and the provisioner with its workers.

    A backend passed in replaces the scheduler (tests use one to see what the routers hand it)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.resolved_database_url)
    # Gateways starting at once on one database (a Deployment's replicas) migrate and bootstrap one at a time.
    with startup_lock(db.engine):
        migrate(db.engine)
        with db.session() as session:
            bootstrap_key = ensure_bootstrap_tenant(session, settings.bootstrap_key)
    artifacts = settings.artifact_location.open()
    if settings.compile_runner == "thread":
        compiles = ThreadCompileRunner(db, artifacts, settings.spool_dir, settings.compile_workers)
    elif settings.compile_runner == "celery":
        from luminal.scheduler.compile_celery import CeleryCompileRunner  # Celery only where it is chosen
        from luminal.scheduler.compile_tasks import CeleryCompileConfig

        compiles = CeleryCompileRunner(db, CeleryCompileConfig.from_settings(settings))
    else:
        compiles = ProcessCompileRunner(
            db, settings.resolved_database_url, settings.artifact_location, settings.spool_dir, settings.compile_workers
        )
    with db.session() as session:
        pending = [d.id for d in deployment_store.pending_compiles(session)]
    for deployment_id in pending:
        compiles.submit(deployment_id)
    # Fails the predictions this replica's earlier process and dead replicas cut off, never live replicas' ones.
    heartbeat = ReplicaHeartbeat(db, replica_id(settings))
    heartbeat.start()
    if backend is not None:
        return Platform(settings, db, artifacts, compiles, backend, bootstrap_key, heartbeat=heartbeat)
    # This process's CPU programs (thread workers', language models') share one OpenMP team: they all run on one
    # thread (scheduler/compute_thread.py).
    compute = ComputeThread()
    queue, registry, provisioner, ledger, drainer, sequences, engines = _start_scheduler(
        settings, db, artifacts, heartbeat.replica_id, compute
    )
    backend = SchedulerBackend(
        queue, provisioner, settings.max_queue_depth, settings.request_timeout_s, settings.execution_timeout_s
    )
    return Platform(
        settings, db, artifacts, compiles, backend, bootstrap_key, queue, registry, provisioner, ledger, heartbeat,
        usage_drainer=drainer, compute=compute, sequences=sequences, generation=engines,
    )  # fmt: skip


def _start_scheduler(
    settings: Settings, db: Database, artifacts: ArtifactStore, gateway_id: str, compute: ComputeThread
) -> tuple[RequestQueue, WorkerRegistry, Provisioner, BufferedLedger, UsageDrainer | None, SequenceTransport, Engines]:
    queue = open_queue(settings.queue_url, settings.queue_namespace)
    registry = open_registry(settings.queue_url, settings.queue_namespace)
    sql_ledger = SqlUsageLedger(db, settings.gpu_prices_per_second)
    # Worker processes on Redis store each batch's usage record with its answers; this gateway's drainer (one of
    # the replicas' consumer group) writes them to the database.
    drainer = None
    if queue.stores_usage:
        drainer = UsageDrainer(settings.queue_url, settings.queue_namespace, sql_ledger, gateway_id).start()
    # Bills what thread workers answered before an earlier process was killed (whatever the backend is now).
    journal_dir = settings.data_dir / "usage-journal"
    replay(journal_dir, sql_ledger)
    # Language models' sequences reach their workers' engines through it (in memory, or on the queue's Redis).
    sequences = open_sequences(settings.queue_url, settings.queue_namespace, settings.reader_lease_s)
    ledger, engines = None, Engines()  # worker processes keep their own ledger, and their engines
    if settings.worker_backend != "thread":
        worker_backend = open_worker_backend(settings, registry)
    else:
        programs = ProgramCache(artifacts.local_path, compute=compute)
        ledger = BufferedLedger(sql_ledger, UsageJournal(journal_dir))
        worker_backend = ThreadWorkers(queue, programs, ledger, registry, sequences=sequences, engines=engines)
    scaling = ProvisionerSettings(
        target_per_replica=settings.scale_target_per_replica,
        idle_to_zero_s=settings.scale_to_zero_after_s,
        scale_up_cooldown_s=settings.scale_up_cooldown_s,
        scale_down_cooldown_s=settings.scale_down_cooldown_s,
        # Workers heartbeat between batches: silent past the longest allowed batch, a worker is hung.
        heartbeat_timeout_s=settings.execution_timeout_s + 30,
    )
    # Gateways sharing one queue (Redis) share its load: one provisioner scales for all, the lease's holder. With
    # in-memory queues each gateway's queue is its own, and so is its provisioner.
    lease = LeaseKeeper(db, PROVISIONER, gateway_id, settings.provisioner_lease_s) if settings.queue_url else None
    provisioner = Provisioner(
        partial(_ready_specs, db),
        queue,
        registry,
        worker_backend,
        scaling,
        tenant_limits=partial(_tenant_limits, db),
        lease=lease,
        sequences=sequences,
    )
    provisioner.start()
    return queue, registry, provisioner, ledger, drainer, sequences, engines


def _ready_specs(db: Database) -> list[WorkerSpec]:
    with db.session() as session:
        return ready_specs(session)


def _tenant_limits(db: Database) -> dict[int, TenantLimits]:
    with db.session() as session:
        tenants = constrained_tenants(session)
        return {t.id: TenantLimits(suspended=t.suspended_at is not None, max_replicas=t.max_replicas) for t in tenants}


def stop_platform(platform: Platform) -> None:
    if platform.provisioner is not None:
        platform.provisioner.close()
    if platform.ledger is not None:
        platform.ledger.close()
    if platform.usage_drainer is not None:
        platform.usage_drainer.close()
    if platform.queue is not None:
        platform.queue.close()
    if platform.sequences is not None:
        platform.sequences.close()
    platform.compiles.shutdown()
    if platform.heartbeat is not None:
        platform.heartbeat.stop()
    platform.db.dispose()


async def _start_grpc(platform: Platform):
    """The OIP gRPC server on this event loop (grpc imported only where one is asked for)."""
    from luminal.gateway.oip_grpc.server import start_grpc_server

    server, _ = await start_grpc_server(platform, platform.settings.grpc_host, platform.settings.grpc_port)
    return server


async def _stop_grpc(server) -> None:
    from luminal.gateway.oip_grpc.server import stop_grpc_server

    await stop_grpc_server(server)


def create_app(
    settings: Settings | None = None,
    backend: InferenceBackend | None = None,
    on_start: Callable[[Platform], None] | None = None,
) -> FastAPI:
    """`on_start` sees the started platform before the first request (the CLI prints the first key there)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tracing.configure(GATEWAY_SERVICE)  # on only where OTEL_EXPORTER_OTLP_ENDPOINT is set
        app.state.platform = platform = start_platform(settings, backend)
        # Subscribed before the first request: a change another gateway makes from now on clears this one's caches.
        platform.metadata_changes = open_metadata_changes(settings.queue_url, settings.queue_namespace)
        await platform.metadata_changes.start(platform.metadata_changed)
        if on_start is not None:
            on_start(platform)
        sweeper = Sweeper.of(settings, platform.db, platform.artifacts)
        sweeper.start()
        grpc_server = await _start_grpc(platform) if settings.grpc_port else None
        sampling = asyncio.create_task(platform.dashboard_sampler.run(), name="dashboard-sampler")
        try:
            yield
        finally:
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)  # stopped before the platform it reads
            try:
                if grpc_server is not None:
                    await _stop_grpc(grpc_server)
                await platform.metadata_changes.close()
                await sweeper.stop()
                await app.state.platform.predictions.shutdown()
                await app.state.platform.rate_limiter.close()
            finally:
                stop_platform(app.state.platform)
                tracing.shutdown()  # after the thread workers stopped: their last spans are exported too

    # strict_content_type=False: clients (curl, SDKs) often omit Content-Type; a body is parsed as what the route
    # expects, never by what a header claims.
    app = FastAPI(title="Luminal Cloud", version="0.1.0", lifespan=lifespan, strict_content_type=False)
    install_error_handlers(app)
    app.add_middleware(InferFastPath)  # the infer routes' answers without FastAPI's routing (the hot path)
    # The inference router first: routes are matched in order, and its infer route is the hot path.
    for module in (inference, server, models, traffic, deployments, lora_adapters, workers, usage, predictions,
                   metrics, keys, admin, dashboard):  # fmt: skip
        app.include_router(module.router)
    app.mount("/dashboard/static", dashboard.static_files(), name="dashboard-static")
    app.include_router(openai_api.router)
    return app
