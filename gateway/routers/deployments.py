"""`/v1/deployments`: deploy a model version (its compile starts at once), list, get and delete deployments."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from luminal.compiler.analysis.targets import TARGETS
from luminal.gateway.dependencies import (
    ArtifactsDep,
    ChangesMetadata,
    CompilesDep,
    DatabaseDep,
    PlatformDep,
    SettingsDep,
    TenantDep,
)
from luminal.gateway.errors import ApiError
from luminal.gateway.platform import Platform
from luminal.gateway.request_body import read_json_model
from luminal.gateway.schemas import DeploymentCreate, DeploymentPublic, DeploymentUpdate, RowId
from luminal.store import deployments as deployment_store
from luminal.store.database import Database
from luminal.store.tables import Deployment, Tenant

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])
# A deployment request is a few settings: 64 KiB is generous and keeps a hostile body from being parsed whole.
MAX_BODY_BYTES = 64 * 1024
_BODY_DOC = {"content": {"application/json": {"schema": DeploymentCreate.model_json_schema()}}, "required": True}


def compile_target(gpu_type: str, prices: dict[str, float]) -> str:
    """The compiler target a deployment on `gpu_type` is compiled for: the target of the same name ("cpu",
    "h100", ...). A type the platform prices but the compiler has no figures for is refused, not compiled for
    some other device whose program its workers could not run."""
    if gpu_type not in prices:
        raise ApiError(400, f"unknown gpu_type {gpu_type!r}; this platform offers {sorted(prices)}")
    if gpu_type not in TARGETS:
        deployable = sorted(t for t in prices if t in TARGETS)
        raise ApiError(
            400,
            f"gpu_type {gpu_type!r} has no compiler target (compiler/analysis/targets.py knows {sorted(TARGETS)}), "
            f"so no program can be built for it; deploy on one of {deployable}",
        )
    return gpu_type


@router.post("", status_code=202, openapi_extra={"requestBody": _BODY_DOC})
async def create_deployment(
    request: Request,
    tenant: TenantDep,
    db: DatabaseDep,
    compiles: CompilesDep,
    settings: SettingsDep,
    platform: PlatformDep,
) -> DeploymentPublic:
    """202: the deployment starts `compiling`; poll it until `ready` or `failed` (or `unschedulable`: compiled,
    but no worker here can run its GPU type; `error` says why)."""
    body = await read_json_model(request, DeploymentCreate, MAX_BODY_BYTES)
    target = compile_target(body.gpu_type, settings.gpu_prices_per_second)
    spec = deployment_store.DeploymentSpec(target=target, **body.model_dump())
    public = await run_in_threadpool(_create, db, tenant, spec, platform)
    compiles.submit(public.id)  # after the commit, so the job sees the row
    return public


def _public(row: Deployment, platform: Platform) -> DeploymentPublic:
    return DeploymentPublic.of(row, platform.unschedulable(row.gpu_type))


def _create(
    db: Database, tenant: Tenant, spec: deployment_store.DeploymentSpec, platform: Platform
) -> DeploymentPublic:
    with db.session() as session:
        return _public(deployment_store.create_deployment(session, tenant, spec), platform)


@router.get("")
def list_deployments(tenant: TenantDep, db: DatabaseDep, platform: PlatformDep) -> list[DeploymentPublic]:
    with db.session() as session:
        return [_public(d, platform) for d in deployment_store.list_deployments(session, tenant)]


@router.get("/{deployment_id}")
def get_deployment(deployment_id: RowId, tenant: TenantDep, db: DatabaseDep, platform: PlatformDep) -> DeploymentPublic:
    with db.session() as session:
        return _public(deployment_store.get_deployment(session, tenant, deployment_id), platform)


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
    deployment_id: RowId, request: Request, tenant: TenantDep, db: DatabaseDep, platform: PlatformDep
) -> DeploymentPublic:
    """Change batching and scaling settings: any of max_batch_size, max_queue_delay_ms, min_replicas,
    max_replicas. The provisioner and scheduler read them from the store; nothing is recompiled."""
    body = await read_json_model(request, DeploymentUpdate, MAX_BODY_BYTES)
    return await run_in_threadpool(_update, db, tenant, deployment_id, body.changes(), platform)


def _update(
    db: Database, tenant: Tenant, deployment_id: int, changes: dict[str, int], platform: Platform
) -> DeploymentPublic:
    with db.session() as session:
        return _public(deployment_store.update_deployment(session, tenant, deployment_id, changes), platform)
