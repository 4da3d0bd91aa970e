"""`/v1/admin/tenants`: the operator's API, opened by the admin token (gateway/admin_auth.py), never a tenant's
key. Create a tenant with its first key, list and get tenants, suspend and resume one, set its quotas.

A suspension or quota change takes effect at once on every gateway: this one clears its caches and publishes the
change on Redis, which clears the others' (gateway/metadata_changes.py). The provisioner, on whichever gateway holds
the lease, re-reads it at once, drains a suspended tenant's deployments and scales them to zero.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from luminal.gateway.admin_auth import AdminOnly
from luminal.gateway.admin_schemas import QuotaUpdate, Suspension, TenantCreate, TenantCreated, TenantPublic
from luminal.gateway.dependencies import ChangesMetadata, DatabaseDep, PlatformDep
from luminal.gateway.platform import Platform
from luminal.gateway.request_body import read_json_model, read_optional_json_model
from luminal.gateway.schemas import RowId
from luminal.store import tenant_admin
from luminal.store.database import Database

router = APIRouter(prefix="/v1/admin/tenants", tags=["admin"], dependencies=[AdminOnly])
# Bodies are a name and a few numbers: 4 KiB is plenty and keeps a hostile body from being read whole.
MAX_BODY_BYTES = 4096


def _doc(model: type, required: bool = True) -> dict:
    return {
        "requestBody": {"content": {"application/json": {"schema": model.model_json_schema()}}, "required": required}
    }


@router.post("", status_code=201, openapi_extra=_doc(TenantCreate))
async def create_tenant(request: Request, db: DatabaseDep) -> TenantCreated:
    """A new tenant and its first API key, which is in this answer only."""
    body = await read_json_model(request, TenantCreate, MAX_BODY_BYTES)
    quotas = body.model_dump(exclude={"name"})
    return await run_in_threadpool(_create, db, body.name, quotas)


def _create(db: Database, name: str, quotas: dict) -> TenantCreated:
    with db.session() as session:
        summary, key = tenant_admin.open_tenant(session, name, quotas)
        return TenantCreated(key=key, **TenantPublic.of(summary).model_dump())


@router.get("")
def list_tenants(db: DatabaseDep) -> list[TenantPublic]:
    with db.session() as session:
        return [TenantPublic.of(s) for s in tenant_admin.list_tenants(session)]


@router.get("/{tenant_id}")
def get_tenant(tenant_id: RowId, db: DatabaseDep) -> TenantPublic:
    with db.session() as session:
        return TenantPublic.of(tenant_admin.get_tenant(session, tenant_id))


@router.post("/{tenant_id}/suspend", openapi_extra=_doc(Suspension, required=False), dependencies=[ChangesMetadata])
async def suspend_tenant(tenant_id: RowId, request: Request, platform: PlatformDep) -> TenantPublic:
    """The tenant's keys are refused (403) from now on; its queued and running requests finish, then its
    deployments scale to zero. The optional body `{"reason": "..."}` is shown to the tenant. 409 when already
    suspended."""
    body = await read_optional_json_model(request, Suspension, MAX_BODY_BYTES)
    return await _changed(platform, tenant_admin.suspend_tenant, tenant_id, body.reason)


@router.post("/{tenant_id}/resume", dependencies=[ChangesMetadata])
async def resume_tenant(tenant_id: RowId, platform: PlatformDep) -> TenantPublic:
    """The tenant's keys work again and its deployments may scale up again. 409 when it is not suspended."""
    return await _changed(platform, tenant_admin.resume_tenant, tenant_id)


@router.patch("/{tenant_id}", openapi_extra=_doc(QuotaUpdate), dependencies=[ChangesMetadata])
async def set_quotas(tenant_id: RowId, request: Request, platform: PlatformDep) -> TenantPublic:
    """Change any of the quotas (null lifts one). Lowering one refuses what comes next, never what exists."""
    body = await read_json_model(request, QuotaUpdate, MAX_BODY_BYTES)
    return await _changed(platform, tenant_admin.set_quotas, tenant_id, body.changes())


async def _changed(platform: Platform, change, tenant_id: int, *args) -> TenantPublic:
    def apply() -> TenantPublic:
        with platform.db.session() as session:
            return TenantPublic.of(change(session, tenant_id, *args))

    public = await run_in_threadpool(apply)
    if platform.provisioner is not None:
        platform.provisioner.refresh()  # apply the tenant's new standing to its workers now, not at the next read
    return public
