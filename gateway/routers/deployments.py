"""`/v1/deployments`: deploy a model version (its compile starts at once), list, get and delete deployments."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import ArtifactsDep, ChangesMetadata, CompilesDep, DatabaseDep, SettingsDep, TenantDep
from luminal.gateway.errors import ApiError
from luminal.gateway.request_body import read_json_model
from luminal.gateway.schemas import DeploymentCreate, DeploymentPublic, DeploymentUpdate, RowId
from luminal.gateway.store import deployments as deployment_store
from luminal.gateway.store.database import Database
from luminal.gateway.store.tables import Tenant

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])
# A deployment request is a few settings: 64 KiB is generous and keeps a hostile body from being parsed whole.
MAX_BODY_BYTES = 64 * 1024
_BODY_DOC = {"content": {"application/json": {"schema": DeploymentCreate.model_json_schema()}}, "required": True}
# Every GPU type compiles for the CPU target in this slice: the CUDA runtime is not built yet.
COMPILE_TARGET = "cpu"


@router.post("", status_code=202, openapi_extra={"requestBody": _BODY_DOC})
async def create_deployment(
    request: Request, tenant: TenantDep, db: DatabaseDep, compiles: CompilesDep, settings: SettingsDep
) -> DeploymentPublic:
    """202: the deployment starts `compiling`; poll it until `ready` or `failed`."""
    body = await read_json_model(request, DeploymentCreate, MAX_BODY_BYTES)
    if body.gpu_type not in settings.gpu_prices_per_second:
        known = sorted(settings.gpu_prices_per_second)
        raise ApiError(400, f"unknown gpu_type {body.gpu_type!r}; this platform offers {known}")
    spec = deployment_store.DeploymentSpec(target=COMPILE_TARGET, **body.model_dump())
    public = await run_in_threadpool(_create, db, tenant, spec)
    compiles.submit(public.id)  # after the commit, so the job sees the row
    return public


def _create(db: Database, tenant: Tenant, spec: deployment_store.DeploymentSpec) -> DeploymentPublic:
    with db.session() as session:
        return DeploymentPublic.of(deployment_store.create_deployment(session, tenant, spec))


@router.get("")
def list_deployments(tenant: TenantDep, db: DatabaseDep) -> list[DeploymentPublic]:
    with db.session() as session:
        return [DeploymentPublic.of(d) for d in deployment_store.list_deployments(session, tenant)]


@router.get("/{deployment_id}")
def get_deployment(deployment_id: RowId, tenant: TenantDep, db: DatabaseDep) -> DeploymentPublic:
    with db.session() as session:
        return DeploymentPublic.of(deployment_store.get_deployment(session, tenant, deployment_id))


@router.delete("/{deployment_id}", status_code=204, dependencies=[ChangesMetadata])
def delete_deployment(deployment_id: RowId, tenant: TenantDep, db: DatabaseDep, artifacts: ArtifactsDep) -> Response:
    with db.session() as session:
        unused = deployment_store.delete_deployment(session, tenant, deployment_id)
    for key in unused:
        artifacts.delete(key)
    return Response(status_code=204)


_UPDATE_DOC = {"content": {"application/json": {"schema": DeploymentUpdate.model_json_schema()}}, "required": True}


@router.patch("/{deployment_id}", openapi_extra={"requestBody": _UPDATE_DOC}, dependencies=[ChangesMetadata])
async def update_deployment(
    deployment_id: RowId, request: Request, tenant: TenantDep, db: DatabaseDep
) -> DeploymentPublic:
    """Change batching and scaling settings: any of max_batch_size, max_queue_delay_ms, min_replicas,
    max_replicas. The provisioner and scheduler read them from the store; nothing is recompiled."""
    body = await read_json_model(request, DeploymentUpdate, MAX_BODY_BYTES)
    return await run_in_threadpool(_update, db, tenant, deployment_id, body.changes())


def _update(db: Database, tenant: Tenant, deployment_id: int, changes: dict[str, int]) -> DeploymentPublic:
    with db.session() as session:
        return DeploymentPublic.of(deployment_store.update_deployment(session, tenant, deployment_id, changes))
