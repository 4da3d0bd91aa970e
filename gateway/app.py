"""The gateway application: builds the platform's parts at start and mounts one router per resource."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from luminal.gateway.errors import install_error_handlers
from luminal.gateway.inference_backend import DirectBackend, InferenceBackend
from luminal.gateway.platform import Platform
from luminal.gateway.predictions import fail_interrupted
from luminal.gateway.routers import deployments, inference, metrics, models, predictions, server
from luminal.gateway.settings import Settings
from luminal.gateway.store import deployments as deployment_store
from luminal.gateway.store.artifacts import LocalArtifactStore
from luminal.gateway.store.database import Database, migrate
from luminal.gateway.store.tenants import ensure_bootstrap_tenant
from luminal.scheduler.compile_jobs import ThreadCompileRunner


def start_platform(settings: Settings, backend: InferenceBackend | None = None) -> Platform:
    """Migrate the schema, create the first tenant on a first start, and resubmit compiles a restart cut off."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(settings.resolved_database_url)
    migrate(db.engine)
    artifacts = LocalArtifactStore(settings.artifacts_dir)
    compiles = ThreadCompileRunner(db, artifacts, settings.spool_dir, settings.compile_workers)
    with db.session() as session:
        bootstrap_key = ensure_bootstrap_tenant(session, settings.bootstrap_key)
        pending = [d.id for d in deployment_store.pending_compiles(session)]
    for deployment_id in pending:
        compiles.submit(deployment_id)
    fail_interrupted(db)
    return Platform(settings, db, artifacts, compiles, backend or DirectBackend(artifacts), bootstrap_key)


def stop_platform(platform: Platform) -> None:
    platform.compiles.shutdown()
    platform.db.dispose()


def create_app(
    settings: Settings | None = None,
    backend: InferenceBackend | None = None,
    on_start: Callable[[Platform], None] | None = None,
) -> FastAPI:
    """`on_start` sees the started platform before the first request (the CLI prints the first key there)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.platform = start_platform(settings, backend)
        if on_start is not None:
            on_start(app.state.platform)
        try:
            yield
        finally:
            try:
                await app.state.platform.predictions.shutdown()
            finally:
                stop_platform(app.state.platform)

    # strict_content_type=False: clients (curl, SDKs) often omit Content-Type; a body is parsed as what the route
    # expects, never by what a header claims.
    app = FastAPI(title="Luminal Cloud", version="0.1.0", lifespan=lifespan, strict_content_type=False)
    install_error_handlers(app)
    for router in (server.router, inference.router, models.router, deployments.router):
        app.include_router(router)
    for router in (predictions.router, metrics.router):
        app.include_router(router)
    return app
