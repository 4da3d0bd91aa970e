"""The request dependencies as `Annotated` aliases: the platform's parts and the caller's tenant.

They are `async def` on purpose: FastAPI runs a plain `def` dependency in a worker thread, and a thread hop per
dependency per request is a large share of a small model's latency."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from luminal.gateway.bearer import credential_of
from luminal.gateway.errors import ApiError
from luminal.gateway.inference_backend import InferenceBackend
from luminal.gateway.platform import Platform
from luminal.gateway.tenant_standing import check_standing
from luminal.scheduler.compile_jobs import CompileRunner
from luminal.store.artifacts import ArtifactStore
from luminal.store.database import Database
from luminal.store.settings import Settings
from luminal.store.tables import Tenant
from luminal.store.tenants import tenant_for_key

MAX_KEY_CHARS = 256  # our keys are 46 characters; refuse to hash anything absurd
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


async def _platform(request: Request) -> Platform:
    return request.app.state.platform


PlatformDep = Annotated[Platform, Depends(_platform)]


async def _settings(p: PlatformDep) -> Settings:
    return p.settings


async def _database(p: PlatformDep) -> Database:
    return p.db


async def _artifacts(p: PlatformDep) -> ArtifactStore:
    return p.artifacts


async def _compiles(p: PlatformDep) -> CompileRunner:
    return p.compiles


async def _backend(p: PlatformDep) -> InferenceBackend:
    return p.backend


SettingsDep = Annotated[Settings, Depends(_settings)]
DatabaseDep = Annotated[Database, Depends(_database)]
ArtifactsDep = Annotated[ArtifactStore, Depends(_artifacts)]
CompilesDep = Annotated[CompileRunner, Depends(_compiles)]
BackendDep = Annotated[InferenceBackend, Depends(_backend)]


async def tenant_of(request: Request) -> Tenant:
    """The tenant of the `Authorization: Bearer <key>` header; 401 without a valid, unrevoked key. Known keys
    come from the platform's short-lived cache; a miss queries the database in a worker thread, off the loop.
    The platform is read from the app, not a sub-dependency: FastAPI solves each dependency's parameters anew on
    every request, and this one runs on every authenticated request."""
    return await tenant_with_key(request.app.state.platform, request.headers.get("authorization"))


async def tenant_with_key(p: Platform, authorization: str | None) -> Tenant:
    """`tenant_of` for the value of an `Authorization` header from any protocol (REST, gRPC metadata)."""
    key = credential_of(authorization, "api key", MAX_KEY_CHARS, _CHALLENGE)
    tenant = p.tenants.get(key)
    if tenant is None:
        generation = p.tenants.generation()
        tenant = await run_in_threadpool(_lookup_tenant, p.db, key)
        if tenant is not None:
            p.tenants.put(key, tenant, generation)
    if tenant is None:
        raise ApiError(401, "invalid or revoked API key", _CHALLENGE)
    await check_standing(tenant, p.rate_limiter)  # 403 when suspended, 429 past its requests per second
    return tenant


async def _invalidate_caches(p: PlatformDep) -> AsyncIterator[None]:
    """For routes that change keys, tenants, models or deployments: the hot path's caches are cleared before the
    change (no lookup started earlier can store a stale entry after it) and again once it is made, and the other
    gateways are told before the answer leaves (`scope="function"`), so theirs are cleared too."""
    p.clear_caches()
    try:
        yield
    finally:
        p.clear_caches()
    # Only once the change is made: a refused one (404, 409) changed nothing, and must not let a client clear
    # every gateway's caches at will.
    await p.metadata_changes.publish()


# `dependencies=[ChangesMetadata]` on a route that revokes a key or changes a tenant, model or deployment.
ChangesMetadata = Depends(_invalidate_caches, scope="function")


def _lookup_tenant(db: Database, key: str) -> Tenant | None:
    with db.session() as session:
        return tenant_for_key(session, key)


TenantDep = Annotated[Tenant, Depends(tenant_of)]
