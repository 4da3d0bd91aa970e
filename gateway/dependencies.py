"""The request dependencies as `Annotated` aliases: the platform's parts and the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from luminal.gateway.errors import ApiError
from luminal.gateway.inference_backend import InferenceBackend
from luminal.gateway.platform import Platform
from luminal.gateway.settings import Settings
from luminal.gateway.store.artifacts import ArtifactStore
from luminal.gateway.store.database import Database
from luminal.gateway.store.tables import Tenant
from luminal.gateway.store.tenants import tenant_for_key
from luminal.scheduler.compile_jobs import CompileRunner

MAX_KEY_CHARS = 256  # our keys are 46 characters; refuse to hash anything absurd
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _platform(request: Request) -> Platform:
    return request.app.state.platform


PlatformDep = Annotated[Platform, Depends(_platform)]


def _settings(p: PlatformDep) -> Settings:
    return p.settings


def _database(p: PlatformDep) -> Database:
    return p.db


def _artifacts(p: PlatformDep) -> ArtifactStore:
    return p.artifacts


def _compiles(p: PlatformDep) -> CompileRunner:
    return p.compiles


def _backend(p: PlatformDep) -> InferenceBackend:
    return p.backend


SettingsDep = Annotated[Settings, Depends(_settings)]
DatabaseDep = Annotated[Database, Depends(_database)]
ArtifactsDep = Annotated[ArtifactStore, Depends(_artifacts)]
CompilesDep = Annotated[CompileRunner, Depends(_compiles)]
BackendDep = Annotated[InferenceBackend, Depends(_backend)]


def _tenant(request: Request, db: DatabaseDep) -> Tenant:
    """The tenant of the `Authorization: Bearer <key>` header; 401 without a valid, unrevoked key. A plain
    `def`, so FastAPI runs its query in a worker thread instead of on the event loop."""
    header = request.headers.get("authorization")
    if header is None:
        raise ApiError(401, "missing Authorization header (expected 'Bearer <api key>')", _CHALLENGE)
    scheme, _, key = header.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or len(key) > MAX_KEY_CHARS:
        raise ApiError(401, "malformed Authorization header (expected 'Bearer <api key>')", _CHALLENGE)
    with db.session() as session:
        tenant = tenant_for_key(session, key)
    if tenant is None:
        raise ApiError(401, "invalid or revoked API key", _CHALLENGE)
    return tenant


TenantDep = Annotated[Tenant, Depends(_tenant)]
