"""`/v1/models`: upload a `.lgraph` as a new version of a named model; list, get and delete models."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from luminal.gateway.dependencies import ArtifactsDep, ChangesMetadata, DatabaseDep, SettingsDep, TenantDep
from luminal.gateway.schemas import (
    MODEL_NAME_PATTERN,
    ModelNameInPath,
    ModelPublic,
    ModelVersionPublic,
    RowId,
    UploadPublic,
)
from luminal.gateway.uploads import register_upload, spool_upload
from luminal.store import models as model_store

router = APIRouter(prefix="/v1/models", tags=["models"])
ModelName = Annotated[str, Query(pattern=MODEL_NAME_PATTERN, description="the model's name")]


@router.post(
    "",
    status_code=201,
    openapi_extra={"requestBody": {"content": {"application/octet-stream": {"schema": {"type": "string"}}}}},
)
async def upload_model(
    request: Request,
    response: Response,
    name: ModelName,
    tenant: TenantDep,
    db: DatabaseDep,
    artifacts: ArtifactsDep,
    settings: SettingsDep,
) -> UploadPublic:
    """The request body is the `.lgraph` file itself. Same bytes as an existing version: 200 with that version."""
    upload = await spool_upload(request, settings.spool_dir, settings.max_upload_bytes)
    try:
        version, created = await run_in_threadpool(register_upload, db, artifacts, tenant, name, upload)
    finally:
        upload.path.unlink(missing_ok=True)
    if not created:
        response.status_code = 200
    return UploadPublic(model=name, created=created, **ModelVersionPublic.of(version).model_dump())


@router.get("")
def list_models(tenant: TenantDep, db: DatabaseDep) -> list[ModelPublic]:
    with db.session() as session:
        return [ModelPublic.of(m) for m in model_store.list_models(session, tenant)]


@router.get("/{name}")
def get_model(name: ModelNameInPath, tenant: TenantDep, db: DatabaseDep) -> ModelPublic:
    with db.session() as session:
        return ModelPublic.of(model_store.get_model(session, tenant, name))


@router.delete("/{name}", status_code=204, dependencies=[ChangesMetadata])
def delete_model(name: ModelNameInPath, tenant: TenantDep, db: DatabaseDep, artifacts: ArtifactsDep) -> Response:
    """Deletes every version and deployment of the model; files no other model uses are removed after the
    database change commits (a crash in between leaves an unreferenced file, never a dangling row)."""
    with db.session() as session:
        unused = model_store.delete_model(session, tenant, name)
    for key in unused:
        artifacts.delete(key)
    return Response(status_code=204)


@router.delete("/{name}/versions/{version}", status_code=204, dependencies=[ChangesMetadata])
def delete_model_version(
    name: ModelNameInPath, version: RowId, tenant: TenantDep, db: DatabaseDep, artifacts: ArtifactsDep
) -> Response:
    """Deletes one version and its deployment; deleting the last version deletes the model."""
    with db.session() as session:
        unused = model_store.delete_version(session, tenant, name, version)
    for key in unused:
        artifacts.delete(key)
    return Response(status_code=204)
