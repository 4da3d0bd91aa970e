"""The LoRA adapters added to live deployments (tables.LoraAdapterRow): add, list, remove."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from luminal.store.errors import Conflict, NotFound
from luminal.store.models import unreferenced
from luminal.store.tables import LoraAdapterRow, Model, Tenant


def add_adapter(session: Session, tenant: Tenant, deployment_id: int, name: str, artifact_key: str) -> LoraAdapterRow:
    """Record adapter `name`; Conflict when the tenant has a model or an adapter of that name."""
    if session.scalars(select(Model).where(Model.tenant_id == tenant.id, Model.name == name)).first() is not None:
        raise Conflict(f"a model named {name!r} exists: an adapter is called by its name, so names must differ")
    if session.scalars(_named(tenant, name)).first() is not None:
        raise Conflict(f"an adapter named {name!r} is already served")
    row = LoraAdapterRow(tenant_id=tenant.id, deployment_id=deployment_id, name=name, artifact_key=artifact_key)
    session.add(row)
    session.flush()
    return row


def adapters_of(session: Session, tenant: Tenant, deployment_id: int) -> list[LoraAdapterRow]:
    stmt = select(LoraAdapterRow).where(
        LoraAdapterRow.tenant_id == tenant.id, LoraAdapterRow.deployment_id == deployment_id
    )
    return list(session.scalars(stmt.order_by(LoraAdapterRow.id)))


def tenant_adapters(session: Session, tenant: Tenant) -> list[LoraAdapterRow]:
    return list(session.scalars(select(LoraAdapterRow).where(LoraAdapterRow.tenant_id == tenant.id)))


def remove_adapter(session: Session, tenant: Tenant, deployment_id: int, name: str) -> list[str]:
    """Delete adapter `name` of the deployment; the artifact keys nothing references any more."""
    row = session.scalars(_named(tenant, name).where(LoraAdapterRow.deployment_id == deployment_id)).first()
    if row is None:
        raise NotFound(f"deployment {deployment_id} has no added adapter {name!r}")
    key = row.artifact_key
    session.delete(row)
    session.flush()
    return unreferenced(session, {key})


def _named(tenant: Tenant, name: str):
    return select(LoraAdapterRow).where(LoraAdapterRow.tenant_id == tenant.id, LoraAdapterRow.name == name)
