"""`/v1/keys`: a tenant's API keys. Create one (the key is in that answer only), list them, revoke one."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import ChangesMetadata, DatabaseDep, TenantDep
from luminal.gateway.request_body import read_optional_json_model
from luminal.gateway.schemas import KeyCreate, KeyCreated, KeyPublic, RowId
from luminal.store import tenants as tenant_store
from luminal.store.database import Database
from luminal.store.tables import Tenant

router = APIRouter(prefix="/v1/keys", tags=["keys"])
# The body is at most a name: 4 KiB is plenty and keeps a hostile body from being read whole.
MAX_BODY_BYTES = 4096
_BODY_DOC = {"content": {"application/json": {"schema": KeyCreate.model_json_schema()}}, "required": False}


@router.post("", status_code=201, openapi_extra={"requestBody": _BODY_DOC})
async def create_key(request: Request, tenant: TenantDep, db: DatabaseDep) -> KeyCreated:
    """The body `{"name": "..."}` is optional. The answer holds the key itself, which is never shown again."""
    body = await read_optional_json_model(request, KeyCreate, MAX_BODY_BYTES)  # no body: an unnamed key
    return await run_in_threadpool(_create, db, tenant, body.name)


def _create(db: Database, tenant: Tenant, name: str | None) -> KeyCreated:
    with db.session() as session:
        row, key = tenant_store.create_key(session, tenant, name=name)
        return KeyCreated(key=key, **KeyPublic.of(row).model_dump())


@router.get("")
def list_keys(tenant: TenantDep, db: DatabaseDep) -> list[KeyPublic]:
    """Every key of the tenant, revoked ones too (with `revoked_at`), oldest first."""
    with db.session() as session:
        return [KeyPublic.of(k) for k in tenant_store.list_keys(session, tenant)]


@router.delete("/{key_id}", dependencies=[ChangesMetadata])
def revoke_key(key_id: RowId, tenant: TenantDep, db: DatabaseDep) -> KeyPublic:
    """Revoke a key: it stops working at once. 409 when it is already revoked or the tenant's last active key."""
    with db.session() as session:
        return KeyPublic.of(tenant_store.revoke_key_id(session, tenant, key_id))
