"""Models and their versions, always scoped to one tenant: a query never returns another tenant's row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from luminal.store.errors import NotFound
from luminal.store.tables import Deployment, LoraAdapterRow, Model, ModelVersion, Prediction, Tenant


@dataclass(frozen=True)
class UploadedGraph:
    """What the upload path learned about a validated `.lgraph` file."""

    sha256: str
    size_bytes: int
    artifact_key: str
    signature: dict[str, Any]
    symbols: dict[str, Any]


def list_models(session: Session, tenant: Tenant) -> list[Model]:
    stmt = select(Model).where(Model.tenant_id == tenant.id).options(selectinload(Model.versions)).order_by(Model.name)
    return list(session.scalars(stmt))


def get_model(session: Session, tenant: Tenant, name: str) -> Model:
    stmt = select(Model).where(Model.tenant_id == tenant.id, Model.name == name).options(selectinload(Model.versions))
    model = session.scalars(stmt).one_or_none()
    if model is None:
        raise NotFound(f"model {name!r} not found")
    return model


def get_version(session: Session, tenant: Tenant, name: str, version: int | None = None) -> ModelVersion:
    """A version of the tenant's model `name`: `version`, or the newest one when None."""
    model = get_model(session, tenant, name)
    if not model.versions:
        raise NotFound(f"model {name!r} has no versions")
    if version is None:
        return model.versions[-1]
    for v in model.versions:
        if v.version == version:
            return v
    raise NotFound(f"model {name!r} has no version {version}")


def add_version(session: Session, tenant: Tenant, name: str, graph: UploadedGraph) -> tuple[ModelVersion, bool]:
    """Record an upload as the next version of `name` (creating the model). An upload whose sha256 matches an
    existing version of the same model returns that version instead; the bool says whether one was created."""
    model = session.scalars(select(Model).where(Model.tenant_id == tenant.id, Model.name == name)).one_or_none()
    if model is None:
        model = Model(tenant_id=tenant.id, name=name)
        session.add(model)
        session.flush()
    existing = session.scalars(
        select(ModelVersion).where(ModelVersion.model_id == model.id, ModelVersion.sha256 == graph.sha256)
    ).one_or_none()
    if existing is not None:
        return existing, False
    newest = session.scalar(select(func.max(ModelVersion.version)).where(ModelVersion.model_id == model.id)) or 0
    row = ModelVersion(
        model_id=model.id,
        version=newest + 1,
        sha256=graph.sha256,
        size_bytes=graph.size_bytes,
        artifact_key=graph.artifact_key,
        signature=graph.signature,
        symbols=graph.symbols,
    )
    session.add(row)
    session.flush()
    session.refresh(model)
    return row, True


def delete_model(session: Session, tenant: Tenant, name: str) -> list[str]:
    """Delete the model, its versions and their deployments; return the artifact keys nothing references any
    more (graphs and compiled programs), which the caller removes after the transaction commits."""
    model = get_model(session, tenant, name)
    keys = {v.artifact_key for v in model.versions}
    keys |= {v.deployment.program_key for v in model.versions if v.deployment and v.deployment.program_key}
    session.delete(model)
    session.flush()
    return unreferenced(session, keys)


def unreferenced(session: Session, keys: set[str]) -> list[str]:
    """The keys among `keys` that no remaining model version, deployment or stored prediction output points at
    (blobs are shared by content across models, predictions and tenants, so one deletion must not remove
    another's file)."""
    if not keys:
        return []
    used = set(session.scalars(select(ModelVersion.artifact_key).where(ModelVersion.artifact_key.in_(keys))))
    used |= set(session.scalars(select(Deployment.program_key).where(Deployment.program_key.in_(keys))))
    used |= set(session.scalars(select(Prediction.output_key).where(Prediction.output_key.in_(keys))))
    used |= set(session.scalars(select(LoraAdapterRow.artifact_key).where(LoraAdapterRow.artifact_key.in_(keys))))
    return sorted(keys - used)


def delete_version(session: Session, tenant: Tenant, name: str, version: int) -> list[str]:
    """Delete one version and its deployment (the model too when it was its last version); return the artifact
    keys nothing references any more, as `delete_model` does."""
    row = get_version(session, tenant, name, version)
    model = row.model
    keys = {row.artifact_key} | (
        {row.deployment.program_key} if row.deployment and row.deployment.program_key else set()
    )
    session.delete(model if len(model.versions) == 1 else row)
    session.flush()
    return unreferenced(session, keys)
