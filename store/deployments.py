"""Deployments: created `compiling`, moved to `ready` (with the compiled program's artifact) or `failed` (with the
compiler's message) by the compile job. Every read is scoped to one tenant."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from luminal.store import quotas
from luminal.store.errors import Conflict, NotFound
from luminal.store.models import get_version, unreferenced
from luminal.store.tables import Deployment, Model, ModelVersion, Tenant

COMPILING, READY, FAILED = "compiling", "ready", "failed"
# Shown, never stored: a ready deployment whose GPU type no worker of this platform can run. It is the
# provisioner's present view (a platform restarted on a GPU machine serves it), so it is computed when read.
UNSCHEDULABLE = "unschedulable"
# What a PATCH may change: the settings the scheduler and provisioner read, never what was compiled.
SCALING_FIELDS = frozenset({"max_batch_size", "max_queue_delay_ms", "min_replicas", "max_replicas"})


@dataclass(frozen=True)
class DeploymentSpec:
    model: str
    version: int | None
    gpu_type: str
    target: str
    max_batch_size: int
    max_queue_delay_ms: int
    min_replicas: int
    max_replicas: int
    prefill_chunk: int = 256  # a language model's prompt tokens prefilled per round
    max_waiting: int = 256  # a language model's sequences allowed to wait for a place in the batch


def _query():
    return select(Deployment).options(joinedload(Deployment.model_version).joinedload(ModelVersion.model))


def create_deployment(session: Session, tenant: Tenant, spec: DeploymentSpec) -> Deployment:
    version = get_version(session, tenant, spec.model, spec.version)
    if version.deployment is not None:
        raise Conflict(
            f"model {spec.model!r} version {version.version} is already deployed (deployment {version.deployment.id})"
        )
    quotas.check_new_deployment(session, tenant.id, spec.min_replicas, spec.max_replicas)
    row = Deployment(
        tenant_id=tenant.id,
        model_version_id=version.id,
        gpu_type=spec.gpu_type,
        target=spec.target,
        max_batch_size=spec.max_batch_size,
        max_queue_delay_ms=spec.max_queue_delay_ms,
        min_replicas=spec.min_replicas,
        max_replicas=spec.max_replicas,
        prefill_chunk=spec.prefill_chunk,
        max_waiting=spec.max_waiting,
        status=COMPILING,
    )
    session.add(row)
    session.flush()
    session.refresh(row)
    return row


def list_deployments(session: Session, tenant: Tenant) -> list[Deployment]:
    return list(session.scalars(_query().where(Deployment.tenant_id == tenant.id).order_by(Deployment.id)))


def get_deployment(session: Session, tenant: Tenant, deployment_id: int) -> Deployment:
    row = session.scalars(
        _query().where(Deployment.tenant_id == tenant.id, Deployment.id == deployment_id)
    ).one_or_none()
    if row is None:
        raise NotFound(f"deployment {deployment_id} not found")
    return row


def deployment_for_model(session: Session, tenant: Tenant, name: str, version: int | None) -> Deployment:
    """The deployment serving `name` (at `version`, else the newest deployed version): what `/v2/models/{name}`
    addresses."""
    stmt = (
        _query()
        .join(Deployment.model_version)
        .join(ModelVersion.model)
        .where(Deployment.tenant_id == tenant.id, Model.tenant_id == tenant.id, Model.name == name)
    )
    if version is not None:
        stmt = stmt.where(ModelVersion.version == version)
    row = session.scalars(stmt.order_by(ModelVersion.version.desc()).limit(1)).unique().one_or_none()
    if row is None:
        what = f"model {name!r}" + (f" version {version}" if version is not None else "")
        raise NotFound(f"{what} is not deployed")
    return row


def delete_deployment(session: Session, tenant: Tenant, deployment_id: int) -> list[str]:
    """Delete the deployment; return its compiled program's key when nothing else uses it."""
    row = get_deployment(session, tenant, deployment_id)
    key = row.program_key
    session.delete(row)
    session.flush()
    return unreferenced(session, {key}) if key else []


def pending_compiles(session: Session) -> list[Deployment]:
    """Deployments still `compiling`: after a restart their jobs are gone and must be submitted again."""
    return list(session.scalars(_query().where(Deployment.status == COMPILING).order_by(Deployment.id)))


def load_for_compile(session: Session, deployment_id: int) -> Deployment | None:
    return session.scalars(_query().where(Deployment.id == deployment_id)).one_or_none()


def finish_compile(session: Session, deployment_id: int, program_key: str | None, error: str | None) -> bool:
    """Record a compile's outcome; False when the deployment was deleted meanwhile (the result is discarded)."""
    row = session.get(Deployment, deployment_id)
    if row is None:
        return False
    row.status = READY if error is None else FAILED
    row.program_key = program_key
    row.error = error
    row.updated_at = dt.datetime.now(dt.UTC)
    return True


def update_deployment(session: Session, tenant: Tenant, deployment_id: int, changes: dict[str, int]) -> Deployment:
    """Apply batching and scaling `changes` (already range-checked); Conflict when the replica bounds they leave
    are out of order, e.g. a new min_replicas above the stored max_replicas."""
    unknown = sorted(set(changes) - SCALING_FIELDS)
    if unknown:
        raise ValueError(f"not a scaling setting: {unknown}")  # a caller's bug: the schema admits only these
    row = get_deployment(session, tenant, deployment_id)
    low = changes.get("min_replicas", row.min_replicas)
    high = changes.get("max_replicas", row.max_replicas)
    if low > high:
        raise Conflict(f"min_replicas {low} would exceed max_replicas {high} of deployment {deployment_id}")
    if {"min_replicas", "max_replicas"} & set(changes):
        quotas.check_scaling(session, tenant.id, deployment_id, low, high)
    for field, value in changes.items():
        setattr(row, field, value)
    row.updated_at = dt.datetime.now(dt.UTC)
    session.flush()
    return row
