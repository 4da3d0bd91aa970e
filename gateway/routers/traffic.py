"""`/v1/models/{name}/traffic`: how a model's requests without a version are shared among its ready versions.

PUT sets a split (`{"split": {"1": 90, "2": 10}}`), DELETE removes it (the newest deployed version answers again),
`POST .../rollback` restores the split the last change replaced, and `GET .../history` lists every change with the
API key that made it. A version stays reachable at `/v2/models/{name}/versions/{v}` whether it takes traffic or
not. Changes clear the routing caches of every gateway before the answer leaves (`ChangesMetadata`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from luminal.gateway.bearer import bearer_credential
from luminal.gateway.dependencies import MAX_KEY_CHARS, ChangesMetadata, DatabaseDep, TenantDep
from luminal.gateway.request_body import read_json_model
from luminal.gateway.schemas import ModelNameInPath
from luminal.gateway.traffic_schemas import TrafficChangePublic, TrafficSplitPublic, TrafficSplitUpdate, VersionTraffic
from luminal.store import traffic as traffic_store
from luminal.store.database import Database
from luminal.store.models import get_model
from luminal.store.tables import Tenant
from luminal.store.tenants import hash_key

router = APIRouter(prefix="/v1/models", tags=["traffic"])
# A change of the split: given the session and who makes it (store/traffic.py's set_split, clear_split, rollback).
Change = Callable[..., object]
MAX_BODY_BYTES = 16 * 1024  # a split of 100 versions is under 2 KiB
_BODY_DOC = {"content": {"application/json": {"schema": TrafficSplitUpdate.model_json_schema()}}, "required": True}


def _caller_hash(request: Request) -> str:
    # The tenant dependency has already checked the key; only its hash is needed to name it in the trail.
    return hash_key(bearer_credential(request, "api key", MAX_KEY_CHARS, {}))


def _split_public(db: Database, tenant: Tenant, name: str) -> TrafficSplitPublic:
    with db.session() as session:
        split = traffic_store.current_split(session, tenant, name)
        states = traffic_store.version_states(get_model(session, tenant, name))
    listed = sorted((split or {}).items())
    versions = [VersionTraffic(version=v, percent=p, status=states.get(v, "deleted")) for v, p in listed]
    return TrafficSplitPublic(
        model=name, split=None if split is None else {str(v): p for v, p in listed}, versions=versions
    )


@router.get("/{name}/traffic")
def get_traffic(name: ModelNameInPath, tenant: TenantDep, db: DatabaseDep) -> TrafficSplitPublic:
    """The split, each listed version with its state now (a version not `ready` takes none of the traffic: its
    share goes to the others in proportion)."""
    return _split_public(db, tenant, name)


@router.put("/{name}/traffic", dependencies=[ChangesMetadata], openapi_extra={"requestBody": _BODY_DOC})
async def set_traffic(
    request: Request, name: ModelNameInPath, tenant: TenantDep, db: DatabaseDep
) -> TrafficSplitPublic:
    """Every version named must have a ready deployment (409 naming one that has not; 404 for one the model does
    not have). Takes effect for the next request."""
    body = await read_json_model(request, TrafficSplitUpdate, MAX_BODY_BYTES)
    change = partial(traffic_store.set_split, tenant=tenant, name=name, split=body.versions())
    return await _apply(request, db, tenant, name, change)


@router.delete("/{name}/traffic", dependencies=[ChangesMetadata])
async def clear_traffic(
    request: Request, name: ModelNameInPath, tenant: TenantDep, db: DatabaseDep
) -> TrafficSplitPublic:
    """Remove the split (recorded in the history, so a rollback restores it)."""
    return await _apply(request, db, tenant, name, partial(traffic_store.clear_split, tenant=tenant, name=name))


@router.post("/{name}/traffic/rollback", dependencies=[ChangesMetadata])
async def rollback_traffic(
    request: Request, name: ModelNameInPath, tenant: TenantDep, db: DatabaseDep
) -> TrafficSplitPublic:
    """Restore the split the last change replaced (409 when there was none, or a version of it is not ready)."""
    return await _apply(request, db, tenant, name, partial(traffic_store.rollback, tenant=tenant, name=name))


@router.get("/{name}/traffic/history")
def traffic_history(
    name: ModelNameInPath,
    tenant: TenantDep,
    db: DatabaseDep,
    limit: Annotated[int, Query(ge=1, le=traffic_store.MAX_HISTORY)] = 100,
) -> list[TrafficChangePublic]:
    """The split's changes, newest first."""
    with db.session() as session:
        return [TrafficChangePublic.model_validate(row) for row in traffic_store.history(session, tenant, name, limit)]


async def _apply(request: Request, db: Database, tenant: Tenant, name: str, change: Change) -> TrafficSplitPublic:
    """Make `change` in one transaction (off the event loop), then read the split it left."""
    return await run_in_threadpool(_apply_now, db, tenant, _caller_hash(request), name, change)


def _apply_now(db: Database, tenant: Tenant, key_hash: str, name: str, change: Change) -> TrafficSplitPublic:
    with db.session() as session:
        change(session, caller=traffic_store.Caller.of_key_hash(session, tenant, key_hash))
    return _split_public(db, tenant, name)
